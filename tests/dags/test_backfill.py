"""`airflow backfill create` over dates that the versions manifest maps to two real MXNet builds,
run by a real Airflow stack (api-server, dag-processor, scheduler with the LocalExecutor) that the
test starts in a scratch home and stops: one result set per build in the results store, each
DAG run recorded as a backfill, and the history plot. Slow (a venv for the older build, real
training under the scheduler); CI runs it."""
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, alive

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
CONF = {"only_variants": ["cpu1-bs64"], "repeats": 3, "epochs": 1, "synthetic_images": 500}
FROM, TO = "2026-11-07", "2026-11-08"  # config/mxnet-builds.json: mxnet==1.9.0, then mxnet==1.9.1
DEADLINE_S = 15 * 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stack_env(home: Path) -> dict:
    port = free_port()
    return {**os.environ, "MXBENCH_HOME": str(home), "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"), "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64)}


def airflow(env, *args, timeout=600) -> str:
    done = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"airflow {' '.join(args)}:\n{(done.stderr or done.stdout)[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    home = tmp_path_factory.mktemp("backfill")
    env = stack_env(home)
    airflow(env, "db", "migrate")
    airflow(env, "pools", "set", "mxbench_local", "1", "mxbench: one run at a time on this machine")
    airflow(env, "dags", "reserialize")
    # before the scheduler runs: SQLite takes one writer at a time
    airflow(env, "backfill", "create", "--dag-id", "mxbench_regression", "--from-date", FROM, "--to-date", TO,
            "--dag-run-conf", json.dumps(CONF))
    # a paused DAG runs no task, backfilled or not; unpaused, it also makes today's scheduled run
    airflow(env, "dags", "unpause", "mxbench_regression")
    logs, procs = home / "logs", []
    logs.mkdir()
    try:
        for name, args in (("api-server", ["api-server", "--workers", "1"]), ("dag-processor", ["dag-processor"]),
                           ("scheduler", ["scheduler"])):
            with open(logs / f"{name}.log", "wb") as log:
                procs.append(subprocess.Popen([AIRFLOW, *args], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True))
        wait_for(lambda: answers(env["AIRFLOW__API__BASE_URL"] + "/api/v2/monitor/health"), procs, 120, "api-server")

        def finished():
            out = airflow(env, "dags", "list-runs", "mxbench_regression", "-o", "json")
            runs = json.loads(next((l for l in reversed(out.splitlines()) if l.startswith("[")), "[]"))  # past warnings
            return len(runs) == 3 and all(r["state"] in ("success", "failed") for r in runs) and runs

        runs = wait_for(finished, procs, DEADLINE_S, "the backfill")
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # executor workers left in its group
            except ProcessLookupError:
                pass
            proc.wait()
    assert not [p.pid for p in procs if alive(p.pid)]
    return home, runs


def answers(url) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).read()
        return True
    except OSError:
        return False


def wait_for(condition, procs, timeout, what):
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        dead = [p.args[1] for p in procs if p.poll() is not None]
        assert not dead and time.monotonic() < end, f"{what}: {', '.join(dead) + ' ended' if dead else 'timed out'}"
        time.sleep(3)


@pytest.mark.slow
def test_a_backfill_measures_one_build_per_date_and_lands_in_the_store(backfilled):
    from mxbench import store

    home, runs = backfilled
    assert {r["state"] for r in runs} == {"success"}, runs
    url = f"sqlite:///{home / 'results.db'}"
    history = store.history(url, "cpu1-bs64", launcher="local")
    per_run = history.groupby("run_id").agg(package=("mxnet_package", "first"), version=("mxnet_version", "first"),
                                            trigger=("trigger", "first"), ok=("status", lambda s: (s == "ok").sum()))
    backfill = per_run[per_run["trigger"] == "backfill"]
    assert sorted(backfill["package"]) == ["mxnet==1.9.0", "mxnet==1.9.1"]
    assert sorted(backfill["version"]) == ["1.9.0", "1.9.1"]  # what the trainer itself reported
    assert list(per_run.loc[per_run["trigger"] == "scheduled", "package"]) == ["mxnet==1.9.1"]  # today's
    assert set(backfill["ok"]) == {CONF["repeats"]}  # every repeat measured, under each build
    assert set(per_run.loc[per_run["trigger"] == "scheduled", "ok"]) == {4}  # the DAG's default repeats
    # the last DAG run's report has the history of both builds, plotted, and the step finder
    import pandas as pd

    folder = max((p for p in (home / "runs").iterdir() if (p / "tables" / "history.csv").is_file()),
                 key=lambda p: (p / "tables" / "history.csv").stat().st_mtime)
    assert set(pd.read_csv(folder / "tables" / "history.csv")["mxnet_package"]) == {"mxnet==1.9.0", "mxnet==1.9.1"}
    assert (folder / "report" / "history.png").stat().st_size > 10_000
    assert "Step finder" in (folder / "report" / "report.md").read_text()
