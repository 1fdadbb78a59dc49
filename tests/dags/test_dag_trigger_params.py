"""Hostile trigger params through the trigger form under dag.test(): a dataset outside the folders
allowed for data sets, and connections nobody marked for mxbench, are refused by name; nothing is
copied and no unmarked connection is used (a plain TCP listener counts who connects)."""
import json
import os
import time
from pathlib import Path

import pytest

from conftest import run_dag
from support.counting_listener import counting_listener

pytestmark = pytest.mark.slow  # dag.test() runs and the REST API on real connections

SECRET = b"worker-only secret 51d0e2\n"
CONF = {"preset": "cpu-demo", "only_variants": ["cpu1-bs32"], "repeats": 1, "epochs": 1, "synthetic_images": 500}


@pytest.fixture
def listener():
    with counting_listener() as (port, seen):
        yield port, seen


def copies_of_the_secret():
    home = Path(os.environ["MXBENCH_HOME"])
    return [p for p in home.rglob("*") if p.is_file() and not p.is_symlink() and SECRET in p.read_bytes()]


def states_of(run):
    return {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 1}


def test_a_worker_file_as_dataset_and_an_unmarked_ssh_host_are_refused(airflow_db, listener, tmp_path):
    port, seen = listener
    secret = tmp_path / "credentials"
    secret.write_bytes(SECRET)
    key = tmp_path / "key"
    key.write_text("not used")
    other_host = {"conn_type": "ssh", "host": "127.0.0.1", "port": port, "login": "ops",
                  "extra": {"key_file": str(key), "no_host_key_check": True}}
    conf = {**CONF, "dataset": f"file://{secret}", "allow_unverified": True, "launchers": ["local", "ssh"],
            "ssh_connections": ["team_b_host"]}
    run, dag_dir = run_dag(conf, {"AIRFLOW_CONN_TEAM_B_HOST": json.dumps(other_host)})
    assert run.state == "failed"
    states = states_of(run)
    assert states["expand_variants"] == "success" and states["prepare_data"] == "failed"
    stages = json.loads((dag_dir / "stages.json").read_text())
    assert stages["prepare_data"] == (
        f"data preparation failed: CIFAR-10 source file://{secret} is not under a folder allowed for data sets "
        f"({Path(os.environ['MXBENCH_HOME']).resolve() / 'data'}); an administrator can list more in "
        "MXBENCH_DATASET_ROOTS")
    request = json.loads((dag_dir / "request.json").read_text())
    assert request["unavailable"]["ssh"].startswith(
        "the ssh target is unavailable: ssh connection 'team_b_host' is not marked for mxbench")
    assert not (dag_dir / "data.json").exists() and not copies_of_the_secret()
    time.sleep(0.3)
    assert seen == []


def test_an_unmarked_results_database_is_refused_before_anything_runs(airflow_db, listener, capfd):
    port, seen = listener
    conf = {**CONF, "launchers": ["local"], "results_connection": "billing_db"}
    run, dag_dir = run_dag(conf, {"AIRFLOW_CONN_BILLING_DB": f"postgres://billing:b1ll@127.0.0.1:{port}/billing"})
    assert run.state == "failed"
    states = states_of(run)
    assert states["expand_variants"] == "failed" and states["prepare_data"] == "upstream_failed"
    assert states["store_results"] in ("upstream_failed", "skipped")
    out, err = capfd.readouterr()
    assert ("expanding the variants failed: results connection 'billing_db' is not marked for mxbench "
            "(or does not exist)") in out + err
    assert "b1ll" not in (dag_dir / "stages.json").read_text()
    time.sleep(0.3)
    assert seen == []
