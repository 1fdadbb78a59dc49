"""The ssh leg through dag.test(): a two-host dist_sync job across two real sshd, and the same
variant on the local launcher, in one DAG run; parsed, joined and reported with the ssh/local row.

Both launchers run on this machine (the sshd are on its loopback addresses), so they share the
machine set's pool: their runs take turns, repeat by repeat.
"""
import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import run_dag, train_python

pytestmark = pytest.mark.slow  # dag.test() runs over real sshd

CONF = {"preset": "cpu-demo", "only_variants": ["cpu2h-bs64"], "launchers": ["local", "ssh"], "repeats": 2,
        "epochs": 1, "synthetic_images": 1000, "notes": ["ssh leg test <b>escaped</b>"]}


@pytest.fixture(scope="module")
def ssh_dag_run(airflow_db, ssh_hosts):
    env = ssh_hosts.airflow_env(mxbench_python=train_python())
    # host 1's key inline, as a secret in the connection: it must never reach a file mxbench writes
    inline = ssh_hosts.connection(0, mxbench_python=train_python(), private_key=ssh_hosts.client_key.read_text())
    del inline["extra"]["key_file"]
    env["AIRFLOW_CONN_MXBENCH_SSH_1"] = json.dumps(inline)
    return run_dag(CONF, env)


def test_both_legs_measure_and_the_dag_run_succeeds(ssh_dag_run):
    run, dag_dir = ssh_dag_run
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv").set_index("key")
    assert runs["status"].to_dict() == {f"cpu2h-bs64__{name}__r{r}": "ok" for r in (1, 2) for name in ("local", "ssh")}
    assert (runs["samples_per_sec"] > 0).all() and (runs["sec_per_epoch"] > 0).all()
    assert run.state == "success"
    # one mapped task for both launchers, in the machine set's pool
    tis = [ti for ti in run.get_task_instances() if ti.task_id == "local.run_variant"]
    assert len(tis) == 4 and {ti.pool for ti in tis} == {"mxbench_local"}


def test_ssh_runs_used_both_hosts_and_brought_their_logs_back(ssh_dag_run, ssh_hosts):
    _, dag_dir = ssh_dag_run
    for r in (1, 2):
        run_dir = dag_dir / f"cpu2h-bs64__ssh__r{r}"
        plan = json.loads((run_dir / "plan.json").read_text())
        assert {p["name"]: p["host"] for p in plan} == {"scheduler": "127.0.0.1", "server-0": "127.0.0.1",
                                                      "server-1": "127.0.0.2", "worker-0": "127.0.0.1",
                                                      "worker-1": "127.0.0.2"}
        assert sorted(p.name for p in run_dir.glob("rank*.log")) == ["rank0.log", "rank1.log"]
        # each host ran its roles in its own work folder, which was removed once its files were fetched
        remote = {r["conn_id"]: r["run_dir"] for r in json.loads((run_dir / "remote.json").read_text())}
        for conn_id, host in zip(("mxbench_ssh_1", "mxbench_ssh_2"), ssh_hosts.hosts):
            assert remote[conn_id] == str(host.workdir / "runs" / dag_dir.name / run_dir.name / conn_id)
            assert not Path(remote[conn_id]).exists()
    local_plan = json.loads((dag_dir / "cpu2h-bs64__local__r1" / "plan.json").read_text())
    assert sorted({p["host"] for p in local_plan}) == ["127.0.0.1", "127.0.0.2"]  # loopback stand-ins


def test_runs_of_launchers_sharing_machines_never_overlap_and_alternate(ssh_dag_run):
    run, dag_dir = ssh_dag_run
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv").sort_values("started_at")
    assert (runs["started_at"].iloc[1:].to_numpy() >= runs["ended_at"].iloc[:-1].to_numpy()).all()
    # the scheduler queues a mapped task's instances by map index (dag.test() runs them in any
    # order): rounds counterbalanced, ABBA, so a linear drift cancels from the comparison
    tis = sorted((ti for ti in run.get_task_instances() if ti.task_id == "local.run_variant"),
                 key=lambda ti: ti.map_index)
    assert [ti.rendered_map_index for ti in tis] == ["cpu2h-bs64__local__r1", "cpu2h-bs64__ssh__r1",
                                                     "cpu2h-bs64__ssh__r2", "cpu2h-bs64__local__r2"]


def test_report_has_the_ssh_local_ratio_and_says_the_launchers_shared_machines(ssh_dag_run):
    _, dag_dir = ssh_dag_run
    ratios = pd.read_csv(dag_dir / "tables" / "ratios.csv")
    (row,) = ratios.to_dict("records")
    assert (row["variant"], row["launcher"], row["reference"]) == ("cpu2h-bs64", "ssh", "local")
    assert row["ratio"] > 0 and row["n"] == 2 and row["n_reference"] == 2
    assert "too few repeats to tell" in row["verdict"]
    md = (dag_dir / "report" / "report.md").read_text()
    assert "| cpu2h-bs64 | ssh / local |" in md
    assert "SHARED MACHINES: local and ssh ran on the same machines (pool mxbench_local" in md
    assert "ONE MACHINE: the local launcher ran multi-host variants on this one machine" in md
    assert "NOTE: ssh leg test" in md
    html = (dag_dir / "report" / "report.html").read_text()
    assert "&lt;b&gt;escaped&lt;/b&gt;" in html and "<b>escaped</b>" not in html


def test_no_secret_reaches_the_run_folder_or_airflow_home(ssh_dag_run, ssh_hosts):
    import os

    _, dag_dir = ssh_dag_run
    body = [line for line in ssh_hosts.client_key.read_text().splitlines() if "PRIVATE KEY" not in line]
    searched = 0
    for root in (dag_dir, Path(os.environ["AIRFLOW_HOME"])):
        for path in root.rglob("*"):
            if path.is_file() and path.suffix not in (".db", ".png"):
                text = path.read_text(errors="replace")
                searched += 1
                assert not any(line in text for line in body) and "PRIVATE KEY" not in text, path
    assert searched > 10
