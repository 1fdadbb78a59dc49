"""Time to accuracy (mxbench.results.convergence): seconds of training until validation top-1 first reached
the preset's target, per run and per variant, the flag on a faster variant (or build) that gets
there later, ``tables/convergence.csv``, the report's section and the store's column."""
import json
import shutil

import pandas as pd
import pytest
import sqlalchemy as sa

from mxbench import report, store
from mxbench.matrix.variants import preset
from mxbench.results import convergence
from mxbench.run_folder import DagRunFolder
from mxbench.stages import pipeline
from support.stored_runs import make_dag_dir, ok_runs, upgrade_to, variant


def epochs(accuracies, times=None, worker=0, key="k"):
    """A run's rows of tables/epochs.csv: one per epoch, 2 s each unless ``times`` says."""
    times = times or [2.0] * len(accuracies)
    return pd.DataFrame({"worker": worker, "epoch": range(len(accuracies)), "time_cost_s": times,
                         "train_accuracy": accuracies, "validation_accuracy": accuracies, "key": key})


def test_time_to_target_sums_epoch_times_up_to_the_first_epoch_that_reaches_it():
    got = convergence.time_to_target(epochs([0.3, 0.6, 0.92, 0.85, 0.95], [5.0, 3.0, 3.5, 3.0, 3.0]), 0.9)
    assert got == {"time_to_target_s": 11.5, "epochs_to_target": 3, "best_validation_accuracy": 0.95}


def test_a_run_that_never_reaches_the_target_has_no_time():
    got = convergence.time_to_target(epochs([0.3, 0.5, 0.7]), 0.9)
    assert got == {"time_to_target_s": None, "epochs_to_target": None, "best_validation_accuracy": 0.7}
    assert convergence.time_to_target(epochs([]), 0.9)["time_to_target_s"] is None


def test_workers_count_as_one_job_the_slowest_time_and_their_mean_accuracy():
    job = pd.concat([epochs([0.8, 0.95], [2.0, 2.0], worker=0), epochs([0.9, 0.95], [3.0, 2.5], worker=1)])
    # epoch 0: mean accuracy 0.85 (worker 1 alone reached 0.9); epoch 1: both, 3.0 + 2.5 s
    assert convergence.time_to_target(job, 0.9)["time_to_target_s"] == 5.5


def test_an_epoch_without_its_time_before_the_target_leaves_the_time_unknown():
    got = convergence.time_to_target(epochs([0.5, 0.95], [float("nan"), 2.0]), 0.9)
    assert got["time_to_target_s"] is None and got["epochs_to_target"] == 2


def test_targets_per_preset_and_data():
    assert convergence.target_for({"preset": "convergence"}) == convergence.TARGETS["convergence", "synthetic"]
    assert convergence.target_for({"preset": "convergence", "dataset": "/data/cifar-10-python.tar.gz"}) \
        == convergence.TARGETS["convergence", "real"]
    assert convergence.target_for({"preset": "seed", "dataset": "https://example.org/cifar.tgz"}) == 0.93
    assert convergence.target_for({"preset": "cpu-demo"}) is None
    assert convergence.target_for({"preset": "cpu-demo", "target_accuracy": 0.5}) == 0.5


def test_the_convergence_preset_is_one_model_at_three_batch_sizes():
    variants = preset("convergence")
    assert [v.batch_size for v in variants] == [128, 200, 256]
    assert len({(v.num_layers, v.workers, v.gpus_per_worker, v.epochs) for v in variants}) == 1


def times_of(rows, target=0.9):
    """Planted per-run times: (variant, batch, samples/s, seconds to target or None) per repeat."""
    return pd.DataFrame([{"key": f"{v}__local__r{i}", "variant": v, "launcher": "local", "repeat": i,
                          "batch_size": batch, "samples_per_sec": speed, "target_accuracy": target,
                          "time_to_target_s": seconds}
                         for i, (v, batch, speed, seconds) in enumerate(rows)])


def flags(summary):
    return {row.variant: row.flag for row in summary.itertuples()}


def test_faster_but_later_is_flagged_and_slower_and_later_is_not():
    summary = convergence.summarise(times_of(
        [("bs128", 128, 100.0, s) for s in (10.0, 11.0, 12.0)]
        + [("bs256", 256, 130.0, s) for s in (15.0, 16.0, 17.0)]  # faster, later: flagged
        + [("bs200", 200, 90.0, s) for s in (20.0, 21.0, 22.0)]  # slower and later: not
        + [("bs160", 160, 120.0, s) for s in (8.0, 9.0, 9.5)]))  # faster and sooner: not
    got = flags(summary)
    assert got["bs128"] == "" and got["bs200"] == "" and got["bs160"] == ""
    assert got["bs256"].startswith("bs256 (local) is faster than bs128 (130.0 against 100.0 samples/s, +30%)")
    assert "reaches 90% validation top-1 later (16.0 s against 11.0 s)" in got["bs256"]
    row = summary.set_index("variant").loc["bs256"]
    assert (row["reference"], row["runs"], row["reached"]) == ("bs128", 3, 3)
    assert (row["time_to_target_min"], row["time_to_target_max"]) == (15.0, 17.0)


def test_a_faster_variant_that_mostly_never_reaches_the_target_is_flagged_as_never():
    summary = convergence.summarise(times_of(
        [("bs128", 128, 100.0, s) for s in (10.0, 11.0, 12.0)]
        + [("bs256", 256, 130.0, s) for s in (None, None, 14.0)]))
    row = summary.set_index("variant").loc["bs256"]
    assert pd.isna(row["time_to_target_s"]) and row["reached"] == 1
    assert "later (never against 11.0 s)" in row["flag"]


def test_no_flag_when_the_reference_itself_never_reached_the_target():
    summary = convergence.summarise(times_of(
        [("bs128", 128, 100.0, None)] * 3 + [("bs256", 256, 130.0, None)] * 3))
    assert set(flags(summary).values()) == {""}


def test_a_build_faster_than_its_baseline_but_later_is_flagged():
    baseline = pd.DataFrame({"samples_per_sec": [100.0, 101.0, 99.0], "time_to_target_s": [10.0, 11.0, 12.0]})
    faster_later = pd.DataFrame({"samples_per_sec": [120.0, 121.0], "time_to_target_s": [13.0, 14.0]})
    slower_later = pd.DataFrame({"samples_per_sec": [90.0, 91.0], "time_to_target_s": [13.0, 14.0]})
    faster_sooner = pd.DataFrame({"samples_per_sec": [120.0, 121.0], "time_to_target_s": [9.0, 9.5]})
    line = convergence.build_flag("conv-bs256 (local)", faster_later, baseline, 0.9)
    assert line.startswith("conv-bs256 (local) is faster than the baseline build") and "13.5 s against 11.0 s" in line
    assert convergence.build_flag("x", slower_later, baseline, 0.9) == ""
    assert convergence.build_flag("x", faster_sooner, baseline, 0.9) == ""


# --- the DAG run's files: tables/convergence.csv, the report, the store ----------------------------

CURVES = {128: ([0.4, 0.86, 0.94, 0.95], 3.0), 256: ([0.2, 0.5, 0.82, 0.93], 2.5)}


@pytest.fixture
def dag_dir(tmp_path):
    """A convergence DAG run: batch 256 faster per image but later to 90% than batch 128."""
    runs = (ok_runs(variant("conv-bs128", 1, 128), speeds=(100.0, 102.0))
            + ok_runs(variant("conv-bs256", 1, 256), speeds=(120.0, 122.0)))
    folder = make_dag_dir(tmp_path, "conv1", runs)
    request = json.loads((folder / "request.json").read_text())
    request["params"]["preset"] = "convergence"
    (folder / "request.json").write_text(json.dumps(request))
    runs = pd.read_csv(folder / "tables" / "runs.csv")
    pd.concat([epochs(CURVES[run.batch_size][0], [CURVES[run.batch_size][1]] * 4, key=run.key)
               .assign(variant=run.variant, launcher=run.launcher, repeat=run.repeat)
               for run in runs.itertuples()]).to_csv(folder / "tables" / "epochs.csv", index=False)
    return folder


def test_join_writes_convergence_csv_and_the_report_shows_the_flag(dag_dir):
    assert "convergence" in pipeline.join(DagRunFolder(dag_dir))
    table = pd.read_csv(dag_dir / "tables" / "convergence.csv").set_index("variant")
    assert table.loc["conv-bs128", "time_to_target_s"] == 9.0  # 0.94 in the third epoch of 3 s
    assert table.loc["conv-bs256", "time_to_target_s"] == 10.0  # 0.93 in the fourth epoch of 2.5 s
    report.build_report(DagRunFolder(dag_dir))
    md = (dag_dir / "report" / "report.md").read_text()
    section = md.split("## Time to accuracy\n\n", 1)[1]
    assert section.startswith("- conv-bs256 (local) is faster than conv-bs128")
    assert "| conv-bs128 | local | 128 | 101.0 | 90% | 9.0 [9.0–9.0] | 2/2 | conv-bs128 |" in section


def test_a_preset_without_a_target_gets_no_time_to_accuracy(dag_dir):
    request = json.loads((dag_dir / "request.json").read_text())
    request["params"]["preset"] = "cpu-demo"
    (dag_dir / "request.json").write_text(json.dumps(request))
    pipeline.join(DagRunFolder(dag_dir))
    report.build_report(DagRunFolder(dag_dir))
    assert pd.read_csv(dag_dir / "tables" / "convergence.csv").empty
    assert "Time to accuracy" not in (dag_dir / "report" / "report.md").read_text()


def test_each_run_stores_its_seconds_to_target(dag_dir, tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_benchmark", run_id="manual__1", trigger="manual")
    with store.engine(url).connect() as connection:
        stored = {r.run_key: (r.target_accuracy, r.time_to_target_s) for r in connection.execute(
            sa.text("SELECT run_key, target_accuracy, time_to_target_s FROM repeats"))}
    assert stored == {"conv-bs128__local__r1": (0.9, 9.0), "conv-bs128__local__r2": (0.9, 9.0),
                      "conv-bs256__local__r1": (0.9, 10.0), "conv-bs256__local__r2": (0.9, 10.0)}


def test_upgrade_to_0005_keeps_earlier_rows_with_no_time_to_target(tmp_path):
    url = f"sqlite:///{tmp_path / 'results.db'}"
    upgrade_to(url, "0004")
    with store.engine(url).begin() as connection:
        connection.execute(sa.text("INSERT INTO variants (id, workers) VALUES ('cpu1-bs32', 1)"))
        connection.execute(sa.text(
            "INSERT INTO dag_runs (run_id, dag_id, trigger, measured_at, state, runs_ok, runs_failed, recorded_at) "
            "VALUES ('old', 'mxbench_benchmark', 'manual', '2026-01-01', 'ok', 1, 0, '2026-01-01')"))
        connection.execute(sa.text(
            "INSERT INTO repeats (dag_id, dag_run, run_key, variant, launcher, repeat, status, samples_per_sec) "
            "VALUES ('mxbench_benchmark', 'old', 'k', 'cpu1-bs32', 'local', 1, 'ok', 100.0)"))
    upgrade_to(url, "0005")
    with store.engine(url).connect() as connection:
        row = connection.execute(sa.text(
            "SELECT samples_per_sec, target_accuracy, time_to_target_s FROM repeats")).one()
    assert tuple(row) == (100.0, None, None)


def test_the_regression_check_flags_a_build_faster_than_its_baseline_but_later_to_the_target(dag_dir, tmp_path):
    """Two stored DAG runs of the old build, 10% slower: its conv-bs256 reached 90% in 6 s, this
    DAG run's takes 10 s (flagged); its conv-bs128 took the same 9 s as now (not flagged)."""
    from mxbench.stages import regression_check

    url = f"sqlite:///{tmp_path / 'results.db'}"
    for day in (1, 2):
        old = tmp_path / f"old{day}"
        shutil.copytree(dag_dir, old)
        runs = pd.read_csv(old / "tables" / "runs.csv")
        runs.assign(samples_per_sec=runs["samples_per_sec"] * 0.9).to_csv(old / "tables" / "runs.csv", index=False)
        epochs_csv = pd.read_csv(old / "tables" / "epochs.csv")
        epochs_csv.loc[epochs_csv["variant"] == "conv-bs256", "time_cost_s"] = 1.5  # 6 s to 90%
        epochs_csv.to_csv(old / "tables" / "epochs.csv", index=False)
        store.record_dag_run(url, DagRunFolder(old), dag_id="mxbench_regression", run_id=f"day{day}",
                             trigger="scheduled",
                             logical_date=pd.Timestamp(f"2026-11-0{day}", tz="UTC").to_pydatetime())
    stored = store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_regression", run_id="day3",
                                  trigger="scheduled",
                                  logical_date=pd.Timestamp("2026-11-03", tz="UTC").to_pydatetime())
    fingerprints = stored["fingerprints"]
    findings = {f["variant"]: f for f in regression_check.check_regressions(DagRunFolder(dag_dir), url,
                                                                            "mxbench_regression", "day3",
                                                                            fingerprints, 5, 0.05)}
    assert findings["conv-bs256"]["convergence"].startswith("conv-bs256 (local) is faster than the baseline build")
    assert findings["conv-bs256"]["convergence"] in findings["conv-bs256"]["message"]
    assert findings["conv-bs128"]["convergence"] == ""
