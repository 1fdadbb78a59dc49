"""Tier 4: the whole DAG through dag.test(), real tiny training on the local launcher.

One variant's trainer crashes (batch size 64, via a python wrapper): its siblings go on,
the report still gets built and lists the failure, and the DAG run ends failed.
"""
import json
import re
import statistics
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, run_dag, train_python
from mxbench.run_folder import DagRunFolder

pytestmark = pytest.mark.slow  # dag.test() runs that train

CRASHING_PYTHON = REPO / "tests" / "fixtures" / "bin" / "python-crashing-bs64"
CONF = {"preset": "cpu-demo", "only_variants": ["cpu1-bs32", "cpu2w-bs32", "cpu1-bs64"], "repeats": 2,
        "epochs": 2, "synthetic_images": 500, "launchers": ["local"]}
SPEED = re.compile(r"Epoch\[(\d+)\] Batch \[\d+-\d+\]\tSpeed: ([\d.]+) samples/sec")


@pytest.fixture(scope="module")
def dag_run(airflow_db):
    return run_dag(CONF, {"MXBENCH_TRAIN_PYTHON": str(CRASHING_PYTHON), "MXBENCH_REAL_TRAIN_PYTHON": train_python()})


def raw_samples_per_sec(run_dir: Path) -> float:
    """Straight from the logs, independently of mxbench.results.parse: per worker, the median Speedometer
    reading after the first epoch, summed over workers."""
    total = 0.0
    for log in sorted(run_dir.glob("rank*.log")):
        readings = [float(s) for e, s in SPEED.findall(log.read_text()) if int(e) >= 1]
        total += statistics.median(readings)
    return total


def test_failed_variant_fails_the_dag_run_but_not_its_siblings(dag_run):
    run, dag_dir = dag_run
    assert run.state == "failed"
    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert states[("report", -1)] == "success" and states[("check_runs", -1)] == "failed"
    run_states = [s for (task, _), s in states.items() if task == "local.run_variant"]
    assert sorted(run_states) == ["failed", "failed", "success", "success", "success", "success"]


def test_report_numbers_match_the_raw_logs(dag_run):
    _, dag_dir = dag_run
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv").set_index("key")
    ok = runs[runs["status"] == "ok"]
    assert sorted(ok.index) == ["cpu1-bs32__local__r1", "cpu1-bs32__local__r2",
                                "cpu2w-bs32__local__r1", "cpu2w-bs32__local__r2"]
    for key, row in ok.iterrows():
        assert row["samples_per_sec"] == pytest.approx(raw_samples_per_sec(dag_dir / key), rel=1e-9)
        assert row["sec_per_epoch"] > 0 and 0 <= row["validation_accuracy"] <= 1
    summary = pd.read_csv(dag_dir / "tables" / "summary.csv").set_index("variant")
    two = summary.loc["cpu2w-bs32"]
    assert two["samples_per_sec"] == pytest.approx(statistics.median(ok.loc[ok["variant"] == "cpu2w-bs32",
                                                                         "samples_per_sec"]))
    base = summary.loc["cpu1-bs32", "samples_per_sec"]
    assert two["scaling_efficiency"] == pytest.approx(two["samples_per_sec"] / base / 2)
    assert summary.loc["cpu1-bs64", "runs_failed"] == 2 and summary.loc["cpu1-bs64", "runs_ok"] == 0


def test_report_lists_the_failure_with_variant_and_cause(dag_run):
    _, dag_dir = dag_run
    md = (dag_dir / "report" / "report.md").read_text()
    assert "SYNTHETIC DATA" in md
    failure = next(line for line in md.splitlines() if line.startswith("| cpu1-bs64__local__r1"))
    # the crashing wrapper exits 139, as a shell does when its child segfaults
    assert "role worker-0 on host 127.0.0.1 was killed by SIGSEGV (exit status 139)" in failure
    assert "Segmentation fault (simulated crash" in failure
    meta = json.loads((dag_dir / "cpu1-bs64__local__r1" / "meta.json").read_text())
    assert meta["failed_role"] == "worker-0" and meta["exit_status"] == "was killed by SIGSEGV (exit status 139)"
    html = (dag_dir / "report" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "SYNTHETIC DATA" in html
    for plot in ("scaling", "epoch_time", "run_order"):
        assert (dag_dir / "report" / f"{plot}.png").read_bytes()[:4] == b"\x89PNG"
    # accuracy over three epochs of synthetic images says nothing: not drawn
    assert not (dag_dir / "report" / "accuracy.png").exists()
    # one launcher: the report says there is no ratio rather than drawing an empty figure
    assert not (dag_dir / "report" / "ratios.png").exists()
    assert "Only one launcher ran: there is no launcher ratio to show." in md and "ratios.png" not in md


def test_every_run_folder_has_logs_metadata_and_plan(dag_run):
    _, dag_dir = dag_run
    request = json.loads((dag_dir / "request.json").read_text())
    assert len(request["runs"]) == 6
    for run in request["runs"]:
        meta = json.loads((dag_dir / run["key"] / "meta.json").read_text())
        assert meta["variant"]["id"] == run["variant"]["id"] and meta["repeat"] == run["repeat"]
        assert meta["status"] in ("ok", "failed") and meta["ended_at"] >= meta["started_at"]
        assert "mxbench_train train" in meta["command"]
        assert (dag_dir / run["key"] / "roles" / "worker-0.log").is_file()
    data = json.loads((dag_dir / "data.json").read_text())
    assert data["synthetic"] is True and data["records"] == {"train": 500, "val": 100}


def test_rerunning_a_completed_run_reuses_it_and_the_report_says_so(dag_run, tmp_path):
    import shutil

    from mxbench.cli import main
    from mxbench.stages import run_stage

    _, original = dag_run
    dag_dir = shutil.copytree(original, tmp_path / original.name)
    request = json.loads((dag_dir / "request.json").read_text())
    done = next(r for r in request["runs"] if r["key"] == "cpu1-bs32__local__r1")
    before = json.loads((dag_dir / done["key"] / "meta.json").read_text())
    for _ in range(2):  # idempotent
        result = run_stage.run_one(done, DagRunFolder(dag_dir), {"dir": "/nonexistent", "records": {"train": 0}},
                                   deadline_s=5)
        assert result["reused"] is True
        assert json.loads((dag_dir / done["key"] / "meta.json").read_text()) == {**before, "reused": True}
    assert main(["report", str(dag_dir)]) == 0
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv").set_index("key")
    assert runs["reused"].to_dict() == {k: k == done["key"] for k in runs.index}
    md = (dag_dir / "report" / "report.md").read_text()
    assert f"REUSED: {done['key']} were measured by an earlier attempt" in md
    assert "2/0 (1 reused)" in md  # cpu1-bs32's runs ok/failed


def test_mxbench_report_rebuilds_the_same_tables(dag_run, tmp_path):
    from mxbench.cli import main

    _, dag_dir = dag_run
    before = pd.read_csv(dag_dir / "tables" / "summary.csv")
    assert main(["report", str(dag_dir)]) == 0
    pd.testing.assert_frame_equal(before, pd.read_csv(dag_dir / "tables" / "summary.csv"))


def test_seed_preset_on_a_machine_without_gpus_is_refused_before_anything_runs(airflow_db, capfd):
    from airflow.dag_processing.dagbag import DagBag

    from mxbench import config

    dag = DagBag(dag_folder=str(REPO / "dags")).dags["mxbench_benchmark"]
    run = dag.test(run_conf={"preset": "seed", "repeats": 1})
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["expand_variants"] == "failed"
    assert states["prepare_data"] == "upstream_failed" and states["local.run_variant"] == "upstream_failed"
    out, err = capfd.readouterr()
    assert "variant 8gpu-bs1024 needs 8 GPUs; the local target has 0" in out + err
    assert not (config.dag_run_dir(run.dag_id, run.run_id) / "data.json").exists()
    # check_runs names the root cause, not one "not run" line per run
    assert states["check_runs"] == "failed"
    assert "AirflowFailException: expanding the variants failed: variant 1gpu-bs128 needs 1 GPUs" in out + err
