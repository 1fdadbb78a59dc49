"""A/A calibration through dag.test(): the local launcher against itself, real tiny training.

The arms run back to back, ABBA; the report gives their verdict, the false calls and the noise
floor; the results store keeps the calibration, and a later DAG run's launcher ratios on the
same hardware show it.
"""
import json

import numpy as np
import pandas as pd
import pytest

from conftest import run_dag
from mxbench.run_folder import DagRunFolder

pytestmark = pytest.mark.slow  # dag.test() runs that train

ROUNDS = 6
CONF = {"preset": "aa-calibration", "only_variants": ["cpu1-bs64"], "launchers": ["local"], "repeats": ROUNDS,
        "epochs": 1, "synthetic_images": 500}


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('results') / 'results.db'}"


@pytest.fixture(scope="module")
def calibrated(airflow_db, url):
    return run_dag(CONF, {"MXBENCH_RESULTS_URL": url})


def test_each_round_runs_both_arms_back_to_back_abba(calibrated):
    run, dag_dir = calibrated
    assert run.state == "success"
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv")
    assert set(runs["status"]) == {"ok"} and len(runs) == 2 * ROUNDS
    # in expansion order, which the scheduler keeps (dag.test() runs mapped tasks in its own order)
    planned = json.loads((dag_dir / "request.json").read_text())["runs"]
    assert [r["round"] for r in planned] == [r for r in range(1, ROUNDS + 1) for _ in (0, 1)]
    assert [r["arm"] for r in planned[0::2]] == ["a", "b", "b", "a", "a", "b"]  # a b, b a, b a, a b, ...
    assert [r["key"] for r in planned[:2]] == ["cpu1-bs64__local__r1", "cpu1-bs64__local-b__r1"]
    assert {r["launcher"] for r in planned} == {"local"}
    assert sorted(runs["launcher"].unique()) == ["local", "local-b"]


def test_the_arms_are_compared_and_the_noise_floor_fits_the_runs(calibrated):
    """dag.test() runs mapped tasks in its own order, so here the arms may not be back to back:
    then the verdict is unpaired and says why (the paired case: test_calibration)."""
    _, dag_dir = calibrated
    ratios = pd.read_csv(dag_dir / "tables" / "ratios.csv")
    assert list(zip(ratios["launcher"], ratios["reference"])) == [("local-b", "local")]
    row = ratios.iloc[0]
    assert (row["n"], row["n_reference"]) == (ROUNDS, ROUNDS)
    assert row["analysis"].startswith((f"paired, {ROUNDS} rounds", "unpaired: "))
    assert row["noise_floor"].startswith("A/A noise (this DAG run's A/A arms): local CV ")
    noise = pd.read_csv(dag_dir / "tables" / "aa_noise.csv")
    assert len(noise) == 1
    floor = noise.iloc[0]
    assert (floor["variant"], floor["launcher"], floor["runs"], floor["rounds"]) == ("cpu1-bs64", "local", 12, 6)
    assert floor["ratio"] == pytest.approx(row["ratio"]) and floor["outcome"] == row["outcome"]
    assert floor["analysis"] == row["analysis"]
    assert bool(floor["false_call"]) == (row["outcome"] in ("slower", "faster"))
    # the fit, done here independently: a line through the log speeds in time order, an arm term
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv").sort_values("started_at")
    y = np.log(runs["samples_per_sec"].to_numpy())
    design = np.column_stack([np.ones(len(y)), np.arange(len(y)), (runs["launcher"] == "local-b").to_numpy(float)])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    assert floor["drift_per_run"] == pytest.approx(coef[1], rel=1e-6, abs=1e-12)
    assert floor["cv"] == pytest.approx(np.sqrt(((y - design @ coef) ** 2).sum() / (len(y) - 3)), rel=1e-6)
    # what the code computed from the runs, never how quiet the machine was (a busy one measured 0.63)
    assert np.isfinite(floor["cv"]) and floor["cv"] > 0


def test_the_report_leads_with_the_false_calls_and_shows_the_noise_floor(calibrated):
    _, dag_dir = calibrated
    md = (dag_dir / "report" / "report.md").read_text()
    sections = [line for line in md.splitlines() if line.startswith("## ")]
    # the answer first, what changed since the previous DAG run, then the conditions; the verdicts and,
    # right after them, the false calls
    assert sections[:5] == ["## Answer", "## Since last time", "## Conditions", "## Verdicts",
                            "## A/A calibration: each launcher against itself"]
    assert "## A/A calibration: the noise floor" in sections
    assert "False calls: " in md and " of 1 A/A comparisons" in md and "Noise floor per run: cpu1-bs64 local: CV" in md
    assert "the rule allows α = 0.05 each: 0.05 expected" in md  # then, if called, how likely
    html = (dag_dir / "report" / "report.html").read_text()
    assert "A/A calibration: the noise floor" in html and "False calls: " in html


def test_the_store_keeps_the_calibration_and_a_later_run_shows_it(calibrated, url, tmp_path):
    from mxbench import store
    from mxbench.results import calibration
    from mxbench.stages import pipeline

    run, dag_dir = calibrated
    stored = json.loads((dag_dir / "stored.json").read_text())
    assert stored["fingerprints"].keys() == {"local", "local-b"}
    fingerprint = stored["fingerprints"]["local"]
    noise = calibration.stored_noise(store.aa_calibrations(url, {fingerprint}))
    own = pd.read_csv(dag_dir / "tables" / "aa_noise.csv").iloc[0]
    assert len(noise) == 1 and noise.iloc[0]["dag_run"] == f"mxbench_benchmark/{run.run_id}"
    for column in ("cv", "drift_per_run", "ratio"):
        assert noise.iloc[0][column] == pytest.approx(own[column])
    assert store.aa_calibrations(url, {"another machine"}).empty
    rows = store.aa_calibrations(url, {fingerprint})
    assert len(calibration.stored_noise(rows, {"local": fingerprint})) == 1
    assert calibration.stored_noise(rows, {"local": "another machine"}).empty  # local's machine differs
    # what join_results reads: the calibration for this run's own machines, by their fingerprints
    stored_again = pipeline.stored_aa_noise(DagRunFolder(dag_dir), url)
    assert stored_again.unavailable is None and len(stored_again.noise) == 1
    down = pipeline.stored_aa_noise(DagRunFolder(dag_dir), "postgresql+psycopg2://mxbench:s3cret@127.0.0.1:1/results")
    assert down.noise is None and down.unavailable.startswith("A/A noise not shown: the results store could not")
    assert "s3cret" not in down.unavailable
    # a later DAG run on that hardware, with two launchers: its ratio shows the stored noise
    later = tmp_path / "later"
    (later / "tables").mkdir(parents=True)
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv")
    runs["launcher"] = runs["launcher"].replace({"local-b": "ssh"})  # as if ssh had run in the arm's place
    runs.to_csv(later / "tables" / "runs.csv", index=False)
    pipeline.join(DagRunFolder(later), calibration.Stored(noise, "the latest A/A calibration on this hardware"))
    ratios = pd.read_csv(later / "tables" / "ratios.csv")
    assert list(ratios["launcher"]) == ["ssh"]
    text = ratios.iloc[0]["noise_floor"]
    assert text.startswith("A/A noise (the latest A/A calibration on this hardware): local CV ")
    assert f"(mxbench_benchmark/{run.run_id}, " in text and "false calls: " in text
    assert pd.read_csv(later / "tables" / "aa_noise.csv").empty  # no arms of its own


def test_a_later_dag_run_judges_contention_with_the_thresholds_this_calibration_measured(calibrated, url):
    """The calibration's runs read their hosts; a DAG run expanding after it on this hardware takes
    its contention thresholds from them (``contention.from_aa`` over the stored runs)."""
    from mxbench.results import contention
    from mxbench.stages import pipeline

    _, dag_dir = calibrated
    fingerprint = json.loads((dag_dir / "stored.json").read_text())["fingerprints"]["local"]
    runs = pd.read_csv(dag_dir / "tables" / "runs.csv")
    assert runs["foreign_cores"].notna().all() and runs["steal"].notna().all()  # every run read its host
    assert runs["run_pressure"].notna().all() and runs["canary_s"].notna().all()  # and what it felt itself
    table = pipeline.contention_thresholds(url)
    # the runs judged contended are no measure of this hardware's quiet (this machine is shared)
    quiet = runs[~contention.flags(runs["contended"])]
    if quiet.empty:
        assert table == {}
        return
    assert list(table) == [contention.table_key(fingerprint, "local")]  # both arms are the local launcher
    found = contention.Thresholds.from_dict(table[contention.table_key(fingerprint, "local")])
    records = quiet[["foreign_cores", "steal", "run_pressure", "canary_s", "cpu_pressure"]].assign(
        dag_run="one").to_dict("records")
    expected = contention.from_aa(records, calibrations=1, dags=["mxbench_benchmark"])
    assert found == expected
    assert found.source.startswith(
        f"from {len(quiet)} A/A runs on this hardware (1 calibration of mxbench_benchmark)"
        if len(quiet) >= contention.MIN_AA_RUNS else f"defaults: {len(quiet)} A/A run(s)")
    # this DAG run expanded before it was stored: the defaults judged it, as its runs table says
    assert set(runs["contention_thresholds"]) == {str(contention.DEFAULTS)}
