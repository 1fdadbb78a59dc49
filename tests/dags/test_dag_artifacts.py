"""The whole benchmark DAG (dag.test(), real tiny training) with S3 as the artifact store: moto's
server on loopback, reached through an Airflow aws connection, as a deployment on several
workers would use it. Each task works in scratch and publishes; the worker's MXBENCH_HOME keeps
no DAG run folder; a second "worker" (another MXBENCH_HOME) runs the next DAG run from the store,
fetching the published data set instead of converting it again. The first DAG run has all three
legs: ssh sends the data from the worker's cache, and the pods read it from their data volume,
which is not the worker's MXBENCH_HOME: the run task puts the published data set there."""
import io
import json

import pandas as pd
import pytest

from conftest import kubernetes_connection, run_dag, train_python
from mxbench import artifacts

pytestmark = pytest.mark.slow  # dag.test() runs with every launcher

CONF = {"preset": "cpu-demo", "only_variants": ["cpu1-bs32"], "repeats": 1, "epochs": 1,
        "synthetic_images": 500, "launchers": ["local"]}


# a connection id of this module's own: Airflow keeps one store per connection id in a process,
# and another module's S3 server (another endpoint) may have been the first one seen here
CONN = "mxbench_artifacts_dags"


def worker_env(s3, home) -> dict:
    return {"MXBENCH_HOME": str(home), "MXBENCH_ARTIFACTS": f"s3://{CONN}@bench/mxbench", **s3.connection(CONN)}


@pytest.fixture(scope="module")
def two_runs(airflow_db, s3, tmp_path_factory, ssh_hosts, kube_standin):
    homes = [tmp_path_factory.mktemp("worker-a"), tmp_path_factory.mktemp("worker-b")]
    legs = {**ssh_hosts.airflow_env(mxbench_python=train_python()),
            # the pods' data volume: the session's data folder, not either worker's MXBENCH_HOME
            "AIRFLOW_CONN_MXBENCH_KUBERNETES": json.dumps(kubernetes_connection(kube_standin))}
    first = run_dag({**CONF, "launchers": ["local", "ssh", "kubernetes"]}, {**legs, **worker_env(s3, homes[0])})[0]
    second = run_dag(CONF, worker_env(s3, homes[1]))[0]
    return [(first, homes[0]), (second, homes[1])]


@pytest.fixture
def store(s3, monkeypatch, tmp_path):
    for key, value in worker_env(s3, tmp_path).items():
        monkeypatch.setenv(key, value)
    return artifacts.Store()


def test_dag_runs_succeed_with_everything_in_the_store(two_runs, store, s3):
    for run, home in two_runs:
        assert run.state == "success"
        assert not (home / "runs").exists()  # every task worked in scratch and published
        assert not (home / "scratch").exists() or not list((home / "scratch").iterdir())
        folder = f"runs/{artifacts.dag_run_name(run.dag_id, run.run_id)}"
        assert store.read_json(f"{folder}/request.json")["dag_id"] == "mxbench_benchmark"
        runs = pd.read_csv(io.BytesIO(store.read_bytes(f"{folder}/tables/runs.csv")))
        assert set(runs["status"]) == {"ok"} and (runs["samples_per_sec"] > 0).all()
        assert (runs["try_number"] == 1).all() and runs["worker"].map(lambda w: isinstance(w, str)).all()
        unit = store.manifest(folder, "cpu1-bs32__local__r1")
        assert {"cpu1-bs32__local__r1/meta.json", "cpu1-bs32__local__r1/rank0.log",
                "cpu1-bs32__local__r1/metrics.json"} <= set(unit["files"])
        report = artifacts.read_report(run.dag_id, run.run_id, store).decode()
        assert "SYNTHETIC DATA" in report and "cpu1-bs32" in report
    first_runs = pd.read_csv(io.BytesIO(store.read_bytes(
        f"runs/{artifacts.dag_run_name(two_runs[0][0].dag_id, two_runs[0][0].run_id)}/tables/runs.csv")))
    assert sorted(first_runs["launcher"]) == ["kubernetes", "local", "ssh"]
    assert len(s3.keys("bench", "mxbench/data/manifests/")) == 1  # one data set, published once
    import sqlite3  # the results store (each worker's default SQLite) records where the files are: the store
    run, home = two_runs[0]
    with sqlite3.connect(home / "results.db") as db:
        (folder,), = db.execute("select folder from dag_runs where run_id = ?", (run.run_id,)).fetchall()
    assert folder == f"s3://{CONN}@bench/mxbench/runs/{artifacts.dag_run_name(run.dag_id, run.run_id)}"


def test_the_second_worker_fetched_the_published_data(two_runs, store):
    (_, first), (run, second) = two_runs
    data = json.loads(store.read_bytes(f"runs/{artifacts.dag_run_name(run.dag_id, run.run_id)}/data.json"))
    name, published = data["name"], store.manifest("data", data["name"])
    assert data["cache_hit"] is True  # prepare_data found the fetched data set complete
    # the second worker converted nothing: its cache holds exactly the published files
    assert (second / "data" / name / "manifest.json").is_file()
    made = json.loads((second / "data" / name / "manifest.json").read_text())
    entry = published["files"][f"{name}/manifest.json"]  # under a prefix named by the content
    assert entry["object"].startswith(f"{name}/") and entry["object"] != f"{name}/manifest.json"
    assert json.loads(store.read_bytes(f"data/{entry['object']}")) == made
    assert set(published["files"]) == {f"{name}/{f.name}" for f in (second / "data" / name).iterdir()
                                       if f.suffix in (".rec", ".idx", ".json")}
