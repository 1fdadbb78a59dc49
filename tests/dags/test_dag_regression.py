"""The regression DAG through dag.test(), with real tiny training and the results store (SQLite):
no baseline yet at first; a baseline of the same build's earlier runs stays quiet; a planted
faster history makes the same measurement a regression, and the DAG run fails naming it."""
import json
import os
import shutil
import warnings

import pandas as pd
import pendulum
import pytest

from conftest import QUIET_WAIT_S, REPO
from mxbench.run_folder import DagRunFolder

pytestmark = pytest.mark.slow  # dag.test() runs that train

# no confirmation rounds: dag.test() runs mapped tasks in no set order, so a confirmation round
# could start before the first rounds end (and then runs); test_confirmation and the backfill
# under the scheduler cover them
CONF = {"only_variants": ["cpu1-bs64"], "repeats": 4, "epochs": 1, "synthetic_images": 1000, "baseline_runs": 3,
        "confirm_rounds": 0, "quiet_wait_s": QUIET_WAIT_S}
DAY = pendulum.datetime(2026, 12, 1, tz="UTC")  # the manifest maps it to the pinned build


def run_regression(conf, logical_date, url, notified=None):
    """dag.test() of the regression DAG, its results in ``url``, its failure notifier (configured,
    as in production, by MXBENCH_NOTIFIERS where the DAG is parsed) appending to ``notified``."""
    from airflow.dag_processing.dagbag import DagBag

    from mxbench import config

    os.environ["MXBENCH_RESULTS_URL"] = url
    if notified:
        os.environ["MXBENCH_NOTIFIERS"] = json.dumps([{"notifier": "support.notifier.RecordingNotifier",
                                                       "kwargs": {"path": str(notified)}}])
    try:
        dag = DagBag(dag_folder=str(REPO / "dags")).dags["mxbench_regression"]
        run = dag.test(run_conf=conf, logical_date=logical_date)
    finally:
        del os.environ["MXBENCH_RESULTS_URL"]
        os.environ.pop("MXBENCH_NOTIFIERS", None)
    return run, config.dag_run_dir(run.dag_id, run.run_id)


def plant(url, dag_dir, run_id, when, scale):
    """A copy of a real DAG run's folder, its speeds scaled, recorded in the store as an earlier run."""
    from mxbench import store

    copy = dag_dir.parent / f"planted-{run_id}"
    shutil.copytree(dag_dir, copy, dirs_exist_ok=True)
    runs = pd.read_csv(copy / "tables" / "runs.csv")
    for column in ("samples_per_sec", "epoch_samples_per_sec"):
        runs[column] = runs[column] * scale
    runs["contended"] = False  # planted history is quiet by construction: a contended repeat feeds no baseline
    runs.to_csv(copy / "tables" / "runs.csv", index=False)
    store.record_dag_run(url, DagRunFolder(copy), dag_id="mxbench_regression", run_id=run_id, trigger="backfill",
                         build={"package": "mxnet==1.9.1"}, logical_date=when, data_interval=(when, when))


def busy(dag_dir, finding: dict) -> bool:
    """Whether so many runs of this real DAG run had other work on their hosts (a machine shared
    with other test suites) that fewer than 3 quiet ones are left: then the check raises nothing and
    says what it left out, which is checked here instead of the speed comparison (issue 39 §4)."""
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv")
    measured = runs[runs["status"] == "ok"]
    contended = int(measured["contended"].astype(object).eq(True).sum())
    if not contended or len(measured) - contended >= 3:
        return False
    assert finding["status"] in ("no result", "no baseline yet"), finding
    assert f"{contended} contended run" in finding["message"], finding
    if contended == len(measured):
        assert "contended: not compared" in finding["message"], finding
    warnings.warn(f"{contended} of {len(measured)} runs of {dag_dir.name} were contended (a busy machine): "
                  "checked that they were left out and nothing was raised instead", stacklevel=2)
    return True


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('results') / 'results.db'}"


@pytest.fixture(scope="module")
def first_run(airflow_db, url):
    return run_regression(CONF, DAY, url)


def test_first_run_has_no_baseline_yet_and_lands_in_the_store(first_run, url):
    from mxbench import store

    run, dag_dir = first_run
    assert run.state == "success"
    findings = pd.read_csv(dag_dir / "tables" / "regression.csv")
    assert busy(dag_dir, findings.iloc[0].to_dict()) or list(findings["status"]) == ["no baseline yet"]
    history = store.history(url, "cpu1-bs64", launcher="local")
    assert len(history) == 4 and set(history["run_id"]) == {run.run_id}
    assert set(history["mxnet_package"]) == {"mxnet==1.9.1"}
    request = json.loads((dag_dir / "request.json").read_text())
    assert request["build"]["package"] == "mxnet==1.9.1"
    assert "Regression check" in (dag_dir / "report" / "report.md").read_text()


def test_a_baseline_of_the_same_speed_stays_quiet(first_run, url):
    """The first run judged again, now with two earlier DAG runs of its own speed in the store (a
    second real run would measure whatever else this machine is doing; the rule's behaviour on
    noise is test_regression.py's, on seeded histories)."""
    from mxbench import store
    from mxbench.report import build_report
    from mxbench.stages import dag_run_failures, regression_check

    run, dag_dir = first_run
    for i in range(2):
        plant(url, dag_dir, f"quiet-{i}", DAY.subtract(days=10 - i), 1.0)
    fingerprints = store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_regression", run_id=run.run_id,
                                        trigger="manual", logical_date=DAY)["fingerprints"]
    (finding,) = regression_check.check_regressions(DagRunFolder(dag_dir), url, run.dag_id, run.run_id, fingerprints,
                                                    baseline_runs=3, min_drop=0.05)
    assert busy(dag_dir, finding) or (finding["status"] == "ok" and finding["baseline_runs"] == "quiet-0 quiet-1"), \
        finding["message"]
    assert dag_run_failures.failure_message(DagRunFolder(dag_dir)) is None
    build_report(DagRunFolder(dag_dir))
    assert (dag_dir / "report" / "history.png").stat().st_size > 10_000


def test_a_planted_faster_history_makes_the_same_speed_a_regression(first_run, url, tmp_path):
    run, dag_dir = first_run
    for i in range(3):  # newer than the quiet ones: the baseline is the last 3 DAG runs
        plant(url, dag_dir, f"fast-{i}", DAY.add(days=1, hours=i + 1), 2.0)  # far beyond run-to-run noise
    notified = tmp_path / "notified.txt"
    flagged, flagged_dir = run_regression(CONF, DAY.add(days=2), url, notified=notified)
    findings = pd.read_csv(flagged_dir / "tables" / "regression.csv")
    if busy(flagged_dir, findings.iloc[0].to_dict()):
        assert flagged.state == "success" and not notified.exists()  # a contended DAG run opens no alert
        return
    assert list(findings["status"]) == ["regression"], findings["message"].tolist()
    assert flagged.state == "failed"  # so that Airflow's failure callbacks and alerting fire
    check_runs = next(ti for ti in flagged.get_task_instances() if ti.task_id == "check_runs")
    assert check_runs.state == "failed"
    md = (flagged_dir / "report" / "report.md").read_text()
    assert "cpu1-bs64 (local): regression:" in md and "against a baseline" in md
    assert {"fast-0", "fast-1", "fast-2"} <= set(findings["baseline_runs"].iloc[0].split())
    assert notified.read_text().split() == ["mxbench_regression", flagged.run_id, "failed"]  # the notifier fired


def test_notifiers_come_from_configuration_and_bad_ones_are_named():
    from mxbench.airflow_glue.notify import failure_notifiers
    from support.notifier import RecordingNotifier

    (notifier,) = failure_notifiers({"MXBENCH_NOTIFIERS": json.dumps(
        [{"notifier": "support.notifier.RecordingNotifier", "kwargs": {"path": "/tmp/x"}}])})
    assert isinstance(notifier, RecordingNotifier) and notifier.path == "/tmp/x"
    assert failure_notifiers({}) == []
    for bad, message in (("[1]", "must be a JSON list"),
                         ('[{"notifier": "json.loads"}]', "not an Airflow BaseNotifier"),
                         ('[{"notifier": "no.such.Module"}]', "cannot import")):
        with pytest.raises(ValueError, match=message):
            failure_notifiers({"MXBENCH_NOTIFIERS": bad})


def test_a_manual_benchmark_run_with_the_regression_runs_id_keeps_to_itself(first_run, url):
    """Run ids are unique per DAG only: a run of mxbench_benchmark that gets the regression run's
    id must not share its folder (and reuse its measurements) nor replace its stored rows."""
    from airflow.dag_processing.dagbag import DagBag

    from mxbench import config, store

    nightly, nightly_dir = first_run
    os.environ["MXBENCH_RESULTS_URL"] = url
    try:
        dag = DagBag(dag_folder=str(REPO / "dags")).dags["mxbench_benchmark"]
        # the same run_after and a logical date: dag.test() gives the regression run's id
        run = dag.test(run_after=nightly.run_after, logical_date=DAY,
                       run_conf={"preset": "cpu-demo", "only_variants": ["cpu1-bs64"], "repeats": 1, "epochs": 1,
                                 "synthetic_images": 1000, "launchers": ["local"]})
    finally:
        del os.environ["MXBENCH_RESULTS_URL"]
    assert run.run_id == nightly.run_id and run.state == "success"
    folder = config.dag_run_dir(run.dag_id, run.run_id)
    assert folder != nightly_dir
    runs = pd.read_csv(folder / "tables" / "runs.csv")
    assert runs["key"].tolist() == ["cpu1-bs64__local__r1"] and not runs["reused"].any()  # measured anew
    stored = store.history(url, "cpu1-bs64", launcher="local")
    mine = stored[stored["run_id"] == run.run_id]
    assert mine.groupby("dag_id").size().to_dict() == {"mxbench_benchmark": 1, "mxbench_regression": 4}
