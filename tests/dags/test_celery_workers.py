"""Several Airflow workers, no shared disk: the benchmark DAG on a real CeleryExecutor stack
(standins/celery_stack.py: Redis broker, PostgreSQL metadata and results databases, two
workers with MXBENCH_HOMEs of their own, the artifact store on moto's S3 server), triggered
through the REST API.

First a DAG run with a local and an ssh leg: its tasks run on both workers, each worker keeps no
run of the other's, the store holds every run with its manifest, and the api-server (which has
no run folders at all) serves the report from the store. Then a worker's machine dies (SIGKILL to
its whole process tree) while it trains: the scheduler notices the lost heartbeat, the run is
retried on the other worker, and the DAG run still succeeds with each run measured once."""
import json
import re
import time
import urllib.parse

import pandas as pd
import pytest

from conftest import QUIET_WAIT_S, train_python
from mxbench_train.localhost import descendants
from standins.celery_stack import WORKERS, CeleryStack, cmdline

pytestmark = pytest.mark.slow  # a real CeleryExecutor stack: Redis, PostgreSQL, two workers, S3

DAG = "mxbench_benchmark"
BASE = {"preset": "cpu-demo", "only_variants": ["cpu1-bs64"], "epochs": 1, "synthetic_images": 500}
BOTH_LEGS = {**BASE, "launchers": ["local", "ssh"], "repeats": 1, "notes": ["celery stack: two legs"]}
# long enough a run that the kill lands while it trains
KILLED = {**BASE, "launchers": ["local"], "repeats": 2, "epochs": 2, "synthetic_images": 1000,
          "notes": ["celery stack: a worker dies"]}
RUN_DEADLINE_S = 6 * 60


@pytest.fixture(scope="module")
def stack(tmp_path_factory, postgres_url, ssh_hosts):
    started = time.monotonic()
    stack = CeleryStack(tmp_path_factory.mktemp("celery-stack"), postgres_url,
                        env=ssh_hosts.airflow_env(mxbench_python=train_python()))
    with stack.stopped_at_end():  # Redis and the S3 server too: prepare() starts them
        stack.prepare()
        stack.start()
        print(f"celery stack up in {time.monotonic() - started:.0f} s")
        yield stack


@pytest.fixture(scope="module")
def admin(stack):
    token = stack.token("admin")
    assert stack.call("PATCH", f"/api/v2/dags/{DAG}", token, {"is_paused": False}).status == 200
    return token


def run_path(run_id: str) -> str:
    return f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}"


def trigger(stack, admin, conf: dict) -> str:
    answer = stack.call("POST", f"/api/v2/dags/{DAG}/dagRuns", admin, {"logical_date": None,
                                                                   "conf": {"quiet_wait_s": QUIET_WAIT_S, **conf}})
    assert answer.status == 200, answer.text
    return answer.json()["dag_run_id"]


def finished(stack, admin, run_id: str) -> str:
    def state():
        found = stack.call("GET", run_path(run_id), admin).json()
        return found["state"] if found["state"] in ("success", "failed") else None

    return stack.wait_for(state, RUN_DEADLINE_S, f"DAG run {run_id}", every=3)


def task_instances(stack, admin, run_id: str) -> list:
    answer = stack.call("GET", f"{run_path(run_id)}/taskInstances?limit=100", admin)
    assert answer.status == 200, answer.text
    return answer.json()["task_instances"]


def shown(tis) -> list:
    return sorted((ti["task_id"], ti["map_index"], ti["state"], ti["hostname"], ti["try_number"]) for ti in tis)


def published_file(stack, folder: str, unit: str, rel: str) -> bytes:
    """A file of a published unit, read through the unit's manifest as the pipeline reads it: a file
    that changed since an earlier try published it (the killed try's progress) is another object."""
    entry = json.loads(stack.artifact(f"{folder}/manifests/{unit}.json"))["files"][rel]
    return stack.artifact(f"{folder}/{entry.get('object', rel)}")


def dag_run_name(run_id: str) -> str:
    from mxbench import config

    return config.dag_run_dir(DAG, run_id).name


def leftovers(stack, worker: str, words) -> list:
    """Paths under a worker's MXBENCH_HOME that name any of ``words`` (a run key, a DAG run)."""
    home = stack.home_of(worker)
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")
                  if any(w in str(p.relative_to(home)) for w in words))


# --- two legs, two workers ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def both_legs(stack, admin):
    run_id = trigger(stack, admin, BOTH_LEGS)
    started = time.monotonic()
    state = finished(stack, admin, run_id)
    print(f"two-leg DAG run {state} in {time.monotonic() - started:.0f} s")
    return run_id, state, task_instances(stack, admin, run_id)


def test_the_dag_run_succeeds_with_tasks_on_both_workers(both_legs):
    _, state, tis = both_legs
    assert state == "success", shown(tis)
    assert {ti["state"] for ti in tis} == {"success"}, shown(tis)
    assert {ti["hostname"] for ti in tis} == set(WORKERS), shown(tis)  # each TI: the worker's own name
    runs = [ti for ti in tis if ti["task_id"] == "local.run_variant"]
    assert sorted(ti["rendered_map_index"] for ti in runs) == ["cpu1-bs64__local__r1", "cpu1-bs64__ssh__r1"]


def test_no_worker_keeps_the_runs_of_a_dag_run(stack, both_legs):
    run_id, _, tis = both_legs
    ran_on = {ti["rendered_map_index"]: ti["hostname"] for ti in tis if ti["task_id"] == "local.run_variant"}
    for worker in WORKERS:
        others = [key for key, host in ran_on.items() if host != worker]
        assert leftovers(stack, worker, others) == [], f"{worker} holds runs that ran on the other worker"
        # stronger, as the store's contract has it: a finished task's scratch folder is removed
        # once published, so no run folder of this DAG run is left on any worker
        assert leftovers(stack, worker, [dag_run_name(run_id), *ran_on]) == [], worker
        assert not (stack.home_of(worker) / "runs").exists(), worker


def test_the_store_holds_every_run_with_its_manifest(stack, both_legs):
    run_id, _, _ = both_legs
    folder = f"runs/{dag_run_name(run_id)}"
    keys = set(stack.keys(folder + "/"))
    for unit in ("cpu1-bs64__local__r1", "cpu1-bs64__ssh__r1"):
        assert f"{folder}/manifests/{unit}.json" in keys, sorted(keys)
        manifest = json.loads(stack.artifact(f"{folder}/manifests/{unit}.json"))
        listed = {f"{folder}/{rel}" for rel in manifest["files"]}
        assert any(rel.endswith("/meta.json") for rel in listed) and any("rank0.log" in rel for rel in listed), listed
        assert listed <= keys, sorted(listed - keys)  # every file the manifest lists is there
    assert {f"{folder}/manifests/report.json", f"{folder}/report/report.html", f"{folder}/tables/runs.csv",
            f"{folder}/request.json"} <= keys, sorted(keys)


def test_the_api_server_serves_the_report_from_the_store(stack, both_legs):
    run_id, _, _ = both_legs
    page = stack.call("GET", f"/mxbench/report/{DAG}/{urllib.parse.quote(run_id, safe='')}", stack.token("viewer"))
    assert page.status == 200, page.text
    assert "cpu1-bs64" in page.text and "two legs" in page.text
    assert page.body == stack.artifact(f"runs/{dag_run_name(run_id)}/report/report.html")
    assert not (stack.home_of("api-server") / "runs").exists()  # nothing to read it from but the store


# --- a worker's machine dies mid-run ------------------------------------------------------------

@pytest.fixture(scope="module")
def killed(stack, admin, both_legs):
    """A DAG run in which the worker training a run is SIGKILLed, whole tree; (run id, state,
    task instances, the killed run's key, the dead worker, the survivor)."""
    run_id = trigger(stack, admin, KILLED)
    trainer = train_python()

    def training():
        for ti in task_instances(stack, admin, run_id):
            if ti["task_id"] == "local.run_variant" and ti["state"] == "running" and ti["hostname"] in WORKERS:
                tree = descendants(stack.process(ti["hostname"]).pid)
                if any(trainer in cmdline(pid) for pid in tree):  # its trainer has started
                    return ti["rendered_map_index"], ti["hostname"]
        return None

    key, victim = stack.wait_for(training, RUN_DEADLINE_S, "a run training on a worker", every=0.5)
    stack.kill_worker(victim)
    killed_at = time.monotonic()
    state = finished(stack, admin, run_id)
    print(f"{victim} killed while training {key}; DAG run {state} {time.monotonic() - killed_at:.0f} s later")
    survivor = next(w for w in WORKERS if w != victim)
    return run_id, state, task_instances(stack, admin, run_id), key, victim, survivor


def test_the_run_is_retried_on_the_other_worker_and_the_dag_run_succeeds(stack, killed):
    run_id, state, tis, key, victim, survivor = killed
    assert state == "success", shown(tis)
    (ti,) = [ti for ti in tis if ti["rendered_map_index"] == key]
    assert (ti["state"], ti["try_number"], ti["hostname"]) == ("success", 2, survivor), shown(tis)
    meta = json.loads(published_file(stack, f"runs/{dag_run_name(run_id)}", key, f"{key}/meta.json"))
    assert (meta["worker"], meta["try_number"], meta["status"]) == (survivor, 2, "ok"), meta


def test_each_run_is_measured_once_in_the_table_and_the_results_db(stack, killed):
    import io

    import sqlalchemy as sa

    run_id, _, _, _, _, _ = killed
    expected = sorted(f"cpu1-bs64__local__r{r}" for r in (1, 2))
    runs = pd.read_csv(io.BytesIO(stack.artifact(f"runs/{dag_run_name(run_id)}/tables/runs.csv")))
    assert sorted(runs["key"]) == expected, runs[["key", "status"]]
    assert (runs["status"] == "ok").all() and (runs["samples_per_sec"] > 0).all(), runs[["key", "status"]]
    engine = sa.create_engine(stack.results_url)
    try:
        with engine.connect() as connection:
            stored = connection.execute(sa.text(
                "SELECT run_key, count(*), min(samples_per_sec) FROM repeats WHERE dag_id = :dag AND dag_run = :run "
                "GROUP BY run_key ORDER BY run_key"), {"dag": DAG, "run": run_id}).all()
    finally:
        engine.dispose()
    assert [(k, n) for k, n, _ in stored] == [(k, 1) for k in expected], stored
    assert all(speed > 0 for _, _, speed in stored), stored


def test_the_report_says_which_run_was_retried(stack, killed):
    run_id, _, _, key, _, survivor = killed
    md = stack.artifact(f"runs/{dag_run_name(run_id)}/report/report.md").decode()
    near = re.compile(rf"retried.{{0,300}}{re.escape(key)}|{re.escape(key)}.{{0,300}}retried", re.I | re.S)
    assert near.search(md), md[:3000]
    assert survivor in md, md[:3000]  # and on which worker it was measured
