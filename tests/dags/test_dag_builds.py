"""The regression DAG measuring two real MXNet builds (1.9.0, 1.9.1) under ssh (a loopback sshd
host that makes each build's venv itself, over SSH) and kubernetes (the stand-in, its connection
mapping each build to an image: here a venv folder, which the stand-in runs as the image's
``python``), through dag.test(): each run's trainer reports the build asked for, and the store
records what ran. A build with no image is refused at expand, no pod made; a host whose pip
cannot reach an index fails its runs with that cause while kubernetes goes on."""
import json
import os
from pathlib import Path

import pandas as pd
import pendulum
import pytest

from conftest import QUIET_WAIT_S, REPO, kubernetes_connection, pods_created, pods_left, train_python

pytestmark = pytest.mark.slow  # dag.test() runs of several MXNet builds

# config/mxnet-builds.json: mxnet==1.9.0 since 2026-11-04, mxnet==1.9.1 (the training env) since 2026-11-08
OLD_DAY = pendulum.datetime(2026, 11, 5, tz="UTC")
NEW_DAY = pendulum.datetime(2026, 12, 1, tz="UTC")
CONF = {"quiet_wait_s": QUIET_WAIT_S, "only_variants": ["cpu1-bs64"], "repeats": 1, "epochs": 1,
        "synthetic_images": 500, "launchers": ["ssh", "kubernetes"], "ssh_connections": ["mxbench_ssh_1"],
        "baseline_runs": 3, "confirm_rounds": 0}  # one run per build is all these tests look at
NO_INDEX = {"PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_FIND_LINKS": "",
            "PIP_RETRIES": "0", "PIP_TIMEOUT": "5"}


def image_of(day) -> str:
    """The folder standing for the image of the build ``day`` measures: the build's venv on this
    machine (made here, as an image would be built; the training env itself for the pinned build)."""
    from mxbench.builds import mxnet_builds

    return str(Path(mxnet_builds.ensure_venv(mxnet_builds.build_for(day))).parent.parent)


def run_regression(day, env: dict, conf=CONF):
    from airflow.dag_processing.dagbag import DagBag

    from mxbench import config

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        run = DagBag(dag_folder=str(REPO / "dags")).dags["mxbench_regression"].test(run_conf=conf, logical_date=day)
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    return run, config.dag_run_dir(run.dag_id, run.run_id)


def k8s_env(standin, **pod) -> dict:
    # "python" as in an image: the stand-in finds it in the image folder's bin/
    return {"AIRFLOW_CONN_MXBENCH_KUBERNETES": json.dumps(kubernetes_connection(standin, python="python", **pod))}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('results') / 'results.db'}"


@pytest.fixture(scope="module")
def two_builds(airflow_db, ssh_hosts, kube_standin, url):
    images = {"1.9.0": image_of(OLD_DAY), "1.9.1": image_of(NEW_DAY)}
    env = {**ssh_hosts.airflow_env(["mxbench_ssh_1"], mxbench_python=train_python()),
           **k8s_env(kube_standin, images=images), "MXBENCH_RESULTS_URL": url}
    return {"1.9.0": run_regression(OLD_DAY, env), "1.9.1": run_regression(NEW_DAY, env)}


def test_each_build_runs_under_ssh_and_kubernetes_and_its_trainer_reports_it(two_builds, ssh_hosts):
    for version, (run, dag_dir) in two_builds.items():
        runs = pd.read_csv(dag_dir / "tables" / "runs.csv").set_index("key")
        assert runs["status"].to_dict() == {"cpu1-bs64__ssh__r1": "ok", "cpu1-bs64__kubernetes__r1": "ok"}, \
            runs["cause"].dropna().to_dict()
        assert run.state == "success"
        assert set(runs["mxnet_asked"]) == {f"mxnet=={version}"} and set(runs["mxnet_reported"]) == {version}
        # ssh: the venv made for the build in the host's work folder; kubernetes: the build's image
        ssh_python = Path(runs.loc["cpu1-bs64__ssh__r1", "runtime"])
        assert ssh_python.parent.parent.parent == ssh_hosts.hosts[0].workdir / "builds", ssh_python
        assert ssh_python.parent.parent.name.startswith(f"mxnet-{version}-")
        assert runs.loc["cpu1-bs64__kubernetes__r1", "runtime"] == image_of(OLD_DAY if version == "1.9.0" else NEW_DAY)
        plan = json.loads((dag_dir / "cpu1-bs64__ssh__r1" / "plan.json").read_text())
        assert {role["argv"][0] for role in plan} == {str(ssh_python)}
        pod_record = json.loads((dag_dir / "cpu1-bs64__kubernetes__r1" / "kubernetes.json").read_text())
        assert pod_record["image"] == runs.loc["cpu1-bs64__kubernetes__r1", "runtime"]


def test_the_build_check_on_a_made_venv_is_cheap(two_builds):
    """The venv was made at expand time; each run only checks it (the figure in ssh.json)."""
    for version, (_, dag_dir) in two_builds.items():
        steps = json.loads((dag_dir / "cpu1-bs64__ssh__r1" / "ssh.json").read_text())
        check = steps["build_check_s.mxbench_ssh_1"]
        print(f"build check on the host, {version}: {check * 1000:.1f} ms")
        assert check < 1  # a stamp check on the host, no pip (the per-run target is benchmarks/build_overhead.py's)


def test_the_store_groups_by_what_ran(two_builds, url):
    from mxbench import store

    for launcher in ("ssh", "kubernetes"):
        history = store.history(url, "cpu1-bs64", launcher=launcher)
        assert sorted(history["mxnet_reported"]) == ["1.9.0", "1.9.1"], history
        assert sorted(history["build"]) == ["1.9.0", "1.9.1"]
        assert sorted(history["mxnet_asked"]) == ["mxnet==1.9.0", "mxnet==1.9.1"]
        assert history["runtime"].notna().all()


def test_a_build_with_no_image_is_refused_at_expand_and_no_pod_is_made(airflow_db, kube_standin, url):
    before = pods_created(kube_standin)
    conf = {**CONF, "launchers": ["kubernetes"]}
    run, dag_dir = run_regression(OLD_DAY, {**k8s_env(kube_standin, images={"1.9.1": image_of(NEW_DAY)}),
                                            "MXBENCH_RESULTS_URL": url}, conf)
    assert run.state == "failed"
    assert {ti.task_id: ti.state for ti in run.get_task_instances()}["expand_variants"] == "failed"
    cause = json.loads((dag_dir / "stages.json").read_text())["expand"]
    assert cause == ("expanding the variants failed: variant cpu1-bs64 under kubernetes: "
                     "kubernetes connection 'mxbench_kubernetes' has no image "
                     "for MXNet build mxnet==1.9.0: give one in mxbench_pod.images (by version or package) or "
                     "mxbench_pod.image_template")
    assert pods_created(kube_standin) == before and pods_left(kube_standin) == []


def test_a_host_whose_pip_reaches_no_index_fails_its_runs_with_that_cause_and_kubernetes_goes_on(
        airflow_db, ssh_hosts, kube_standin, url):
    ssh = ssh_hosts.connection(1, mxbench_python=train_python(), mxbench_env=NO_INDEX)  # host 2: no venvs yet
    env = {"AIRFLOW_CONN_MXBENCH_SSH_NO_INDEX": json.dumps(ssh), "MXBENCH_RESULTS_URL": url,
           **k8s_env(kube_standin, images={"1.9.0": image_of(OLD_DAY)})}
    run, dag_dir = run_regression(OLD_DAY, env, {**CONF, "ssh_connections": ["mxbench_ssh_no_index"]})
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv").set_index("key")
    assert runs.loc["cpu1-bs64__kubernetes__r1", "status"] == "ok"
    assert runs.loc["cpu1-bs64__ssh__r1", "status"] == "failed"
    cause = runs.loc["cpu1-bs64__ssh__r1", "cause"]
    assert "the ssh target cannot run MXNet build mxnet==1.9.0: host mxbench_ssh_no_index" in cause
    assert "pip could not reach a package index" in cause
    assert run.state == "failed"  # a run measured nothing: check_runs says so
    assert not list((ssh_hosts.hosts[1].workdir / "builds").glob("mxnet-*/bin"))  # nothing half-made left
