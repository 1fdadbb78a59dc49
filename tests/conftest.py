"""Shared fixtures. Tests run in the orchestration venv; anything that needs mxnet runs in
the training venv as a subprocess, exactly as the pipeline runs it."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mxbench_train.localhost import is_running
from standins.airflow_stack import SCRATCH_QUIET_WAIT_S, checkout_env

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dags"))

# Before anything imports airflow (it reads its configuration once): a private Airflow home
# and MXBENCH_HOME for this test session, SQLite, the checkout's DAGs and plugins.
_SESSION_HOME = Path(tempfile.mkdtemp(prefix="mxbench-tests-"))
os.environ.update(checkout_env(_SESSION_HOME, _SESSION_HOME / "airflow"))
# scripts/test.sh runs the tests in several pytest sessions at once (pytest-xdist workers), each with a
# home of its own; MXBENCH_TEST_CACHE, a folder it makes for the whole run, holds the MXNet build venvs
# they all use: each made once (pip, about 30 s on 2 busy cores) under its cache entry's lock, not once per session
if os.environ.get("MXBENCH_TEST_CACHE"):
    _SHARED_ENVS = Path(os.environ["MXBENCH_TEST_CACHE"]) / "envs"
    _SHARED_ENVS.mkdir(parents=True, exist_ok=True)
    (_SESSION_HOME / "envs").symlink_to(_SHARED_ENVS, target_is_directory=True)


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated Airflow metadata DB (SQLite) for dag.test()."""
    done = subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return os.environ["AIRFLOW_HOME"]


def train_python():
    python = Path(os.environ.get("MXBENCH_TRAIN_PYTHON", REPO / ".venv/train/bin/python"))
    if not python.exists():
        raise RuntimeError(f"training env {python} is missing: run scripts/setup.sh")
    return str(python)


@pytest.fixture(scope="session")
def train_py():
    return train_python()


def run_trainer(*args, cwd=None, timeout=300, env=None):
    """``python -m mxbench_train ARGS`` in the training env; the CompletedProcess."""
    return subprocess.run([train_python(), "-m", "mxbench_train", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def cifar_source(tmp_path_factory):
    """A small SYNTHETIC CIFAR-10 folder in the official python layout."""
    out = tmp_path_factory.mktemp("cifar-src")
    done = run_trainer("synthetic-cifar10", "--out", out, "--train", 1000, "--test", 200)
    assert done.returncode == 0, done.stderr
    return out / "cifar-10-batches-py"


@pytest.fixture(scope="session")
def cifar_rec(tmp_path_factory, cifar_source):
    """The synthetic source converted with im2rec: a folder with cifar10_{train,val}.{rec,idx}."""
    out = tmp_path_factory.mktemp("cifar-rec")
    done = run_trainer("prepare-cifar10", "--source", cifar_source, "--out", out, "--allow-unverified")
    assert done.returncode == 0, done.stderr
    return out


# Each run's quiet check looks once, as in the test stacks' scheduled runs (the setting they make)
QUIET_WAIT_S = SCRATCH_QUIET_WAIT_S
# the kube stand-in's node-monitor-grace-period: a node not heard from over its link this long is Ready:
# Unknown (a cluster waits 40 s), so that link faults end fast; not so short that a loaded box's late heartbeat trips it
NODE_GRACE_S = 20


@pytest.fixture(scope="session")
def stack_db(tmp_path_factory) -> Path:
    """A metadata DB migrated, with the mxbench pools, once for the session's Airflow stacks: each
    copies it (``AirflowStack.prepare(template=...)``) instead of two Airflow CLI runs of its own."""
    from standins.airflow_stack import AirflowStack

    stack = AirflowStack(tmp_path_factory.mktemp("stack-db"))
    db = stack.sqlite_db()  # first: refuses a metadata DB that is not a file, before migrating anything
    stack.migrate()
    return db


def share_build_venvs(home: Path) -> None:
    """Make ``home``'s MXNet build venvs (``home/envs``) the session's (``$MXBENCH_HOME/envs``): a
    build's venv, made and stamped once, serves every Airflow home of the session instead of pip
    making it again (28 s for mxnet==1.9.0 on 2 busy cores). What a DAG run measures stays in its own home."""
    from mxbench import config

    shared = config.home() / "envs"
    shared.mkdir(parents=True, exist_ok=True)
    (Path(home) / "envs").symlink_to(shared, target_is_directory=True)


def run_dag(conf: dict, env: dict):
    """``dag.test()`` of the benchmark DAG with ``env`` set meanwhile (then restored): the DagRun
    and its run folder. Each run's quiet check looks once (``QUIET_WAIT_S``, unless ``conf`` says)."""
    from airflow.dag_processing.dagbag import DagBag

    from mxbench import config

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        run = DagBag(dag_folder=str(REPO / "dags")).dags["mxbench_benchmark"].test(
            run_conf={"quiet_wait_s": QUIET_WAIT_S, **conf})
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    return run, config.dag_run_dir(run.dag_id, run.run_id)


def pytest_sessionfinish(session, exitstatus):
    """Keep the session's Airflow home and runs when something failed, to look at; else tidy up."""
    if exitstatus == 0:
        import shutil

        shutil.rmtree(_SESSION_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def ssh_hosts(tmp_path_factory):
    """Two real sshd on 127.0.0.1 and 127.0.0.2 (key auth only), stopped at teardown.

    A standins.sshd.Fleet. Fails (never skips) where sshd cannot run: scripts/setup.sh
    installs openssh-server when run as root."""
    from standins.sshd import start, unavailable

    reason = unavailable()
    if reason:
        pytest.fail(f"loopback sshd hosts unavailable: {reason}", pytrace=False)
    fleet = start(tmp_path_factory.mktemp("sshd"))
    try:
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture(scope="session")
def netns_ssh_hosts(tmp_path_factory):
    """Two real sshd, each in a network namespace of its own, joined by a link shaped to 1 Gbit/s,
    and by a second, ``slow`` one at 4 Mbit/s (standins.netns; the cpu-link preset's): (fleet,
    network). Nothing of either is left at teardown."""
    from mxbench_train.localhost import is_running as alive
    from standins import netns, sshd

    fleet = sshd.start(tmp_path_factory.mktemp("sshd-netns"), link_rate="1gbit", links={"slow": "4mbit"})
    assert fleet.network["kind"] == "netns", fleet.network  # root with iproute2: this machine and CI
    network = netns.Network.from_json(fleet.network)
    try:
        yield fleet, network
    finally:
        fleet.stop()
    assert not network.existing()
    assert not any(alive(h.pid, h.starttime) for h in fleet.hosts)


@pytest.fixture(scope="session")
def kube_standin(tmp_path_factory):
    """The loopback Kubernetes API server stand-in (standins.kube): two nodes
    that are this machine, each a network namespace, with a VXLAN overlay between them (the pod
    network), every manifest strictly validated; stopped at teardown with no pod process and
    nothing of its network left."""
    from standins import netns
    from standins.kube import start

    with start(tmp_path_factory.mktemp("kube"), nodes=2, gpus_per_node=0, validate=True,
               node_grace_s=NODE_GRACE_S) as standin:
        assert standin.network["kind"] == "vxlan", standin.network  # root with iproute2: this machine and CI
        yield standin
    # every pod's processes, the roles' own children included, ended with the stand-in (their
    # command lines hold the pods' folders under its root)
    left = [pid for pid in processes_mentioning(str(standin.root)) if is_running(pid)]
    assert not left, f"pod processes outlived the stand-in: {left}"
    assert not netns.Network.from_json(standin.network["underlay"]).existing()  # its pods' namespaces too


def processes_mentioning(text: str):
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                yield int(cmdline.parent.name)
        except OSError:
            continue


def kubernetes_connection(standin, python=None, **pod) -> dict:
    """An Airflow kubernetes connection (as AIRFLOW_CONN_* JSON) to the stand-in, whose pods run
    the training env's python and read the data under MXBENCH_HOME/data."""
    from mxbench import config

    config.data_dir().mkdir(parents=True, exist_ok=True)
    settings = {"image": "mxbench-standin", "python": python or train_python(),
                "data": {"host_path": str(config.data_dir())}, **pod}
    return {"conn_type": "kubernetes",
            "extra": {"kube_config_path": str(standin.kubeconfig), "namespace": "mxbench", "mxbench_pod": settings}}


def core_api(standin):
    """A CoreV1Api client of the stand-in, as the tests' own eyes on it."""
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(config_file=str(standin.kubeconfig)))


def pods_left(standin):
    return [p.metadata.name for p in core_api(standin).list_pod_for_all_namespaces().items]


def pods_created(standin) -> int:
    """Pods the stand-in was ever asked to make (its manifests log)."""
    manifests = Path(standin.root) / "manifests.jsonl"
    lines = manifests.read_text().splitlines() if manifests.exists() else []
    return sum(1 for line in lines if json.loads(line).get("kind") == "Pod")


# --- a throwaway PostgreSQL server (the results store's tests) -------------------------------

@pytest.fixture(scope="session")
def postgres_url():
    """A real PostgreSQL server of its own (loopback, trust auth) with an empty database; its
    SQLAlchemy URL. Fails (never skips) where PostgreSQL cannot run."""
    import shutil

    from standins import postgres

    # not under pytest's own temp root: that is private to root, and the server runs as postgres
    data_root = Path(tempfile.mkdtemp(prefix="mxbench-postgres-"))
    try:
        pg_ctl, data, port = postgres.start(data_root)
    except RuntimeError as exc:
        shutil.rmtree(data_root, ignore_errors=True)
        pytest.fail(f"PostgreSQL unavailable: {exc}", pytrace=False)
    try:
        yield postgres.create_database(postgres.url(port), "mxbench_test")
    finally:
        # "-m fast" ends client connections too, so engines still pooled there cannot hold it up
        postgres.stop(pg_ctl)
    left = [pid for pid in processes_mentioning(str(data)) if is_running(pid)]
    assert not left and not (data / "postmaster.pid").exists(), \
        f"the postgres server of {data} outlived the fixture: {left}"
    shutil.rmtree(data_root, ignore_errors=True)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server on loopback (standins/s3_server.py) with a bucket "bench", per module."""
    from standins.s3_server import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3") / "moto.log")
    server.create_bucket("bench")
    yield server
    server.stop()
