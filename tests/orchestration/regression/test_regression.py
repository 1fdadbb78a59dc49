"""The regression rule on seeded histories: noise alone must not alert, a real 10% step must,
too little history is "no baseline yet"; and the step finder names the first slower build."""
import numpy as np
import pandas as pd
import pytest

from mxbench.regression.regression_rule import check

CV = 0.03  # run-to-run spread of samples/s seen on the CPU demo and in the seed's logs
REPEATS, BASELINE_RUNS = 4, 5


def history(rng, mean, runs=BASELINE_RUNS):
    """A baseline: ``runs`` DAG runs of REPEATS repeats each, each run with a drift of its own."""
    values, ids = [], []
    for r in range(runs):
        drift = rng.normal(0, CV / 2)
        values += list(mean * (1 + drift) * (1 + rng.normal(0, CV, REPEATS)))
        ids += [f"run{r}"] * REPEATS
    return values, ids


def current(rng, mean):
    return list(mean * (1 + rng.normal(0, CV / 2)) * (1 + rng.normal(0, CV, REPEATS)))


def test_noise_alone_does_not_alert():
    rng = np.random.default_rng(1)
    alerts = 0
    for _ in range(300):
        base, ids = history(rng, 1000.0)
        alerts += check("v", "local", current(rng, 1000.0), base, ids).status == "regression"
    assert alerts / 300 <= 0.05


def test_a_planted_ten_percent_step_alerts():
    rng = np.random.default_rng(2)
    found = []
    for _ in range(100):
        base, ids = history(rng, 1000.0)
        found.append(check("v", "local", current(rng, 900.0), base, ids))
    assert sum(f.status == "regression" for f in found) / 100 >= 0.95
    hit = next(f for f in found if f.status == "regression")
    assert hit.change == pytest.approx(-0.10, abs=0.05) and hit.ci_high < 0 and hit.p_value < 0.05
    assert "regression" in hit.message and "against a baseline" in hit.message and "DAG runs" in hit.message


def test_a_tiny_but_certain_drop_is_not_worth_an_alert():
    rng = np.random.default_rng(3)
    base = list(1000 * (1 + rng.normal(0, 0.002, 20)))
    finding = check("v", "local", list(980 * (1 + rng.normal(0, 0.002, 4))), base, [f"r{i // 4}" for i in range(20)])
    assert finding.p_value < 0.05 and finding.status == "ok"  # 2% < MIN_DROP


def test_too_little_history_is_no_baseline_yet_not_an_error():
    rng = np.random.default_rng(4)
    base, ids = history(rng, 1000.0, runs=1)
    assert check("v", "local", current(rng, 500.0), base, ids).status == "no baseline yet"
    assert check("v", "local", current(rng, 500.0), [], []).status == "no baseline yet"
    assert check("v", "local", [], *history(rng, 1000.0)).status == "no result"


def test_an_improvement_is_told_apart():
    rng = np.random.default_rng(5)
    base, ids = history(rng, 1000.0)
    assert check("v", "local", current(rng, 1200.0), base, ids).status == "improved"


def test_the_step_finder_names_the_first_slower_build():
    from mxbench.report import step_table

    rng = np.random.default_rng(6)
    rows = []
    for day, (build, mean) in enumerate([("1.7.0", 1000), ("1.8.0", 1005), ("1.9.0", 880), ("1.9.1", 870)]):
        for value in current(rng, mean) + current(rng, mean):
            rows.append({"variant": "v", "launcher": "local", "environment": "aaaa", "status": "ok",
                         "run_id": f"day{day}", "build": build, "samples_per_sec": value,
                         "when": pd.Timestamp("2026-11-01") + pd.Timedelta(days=day)})
    (step,) = step_table(pd.DataFrame(rows)).to_dict("records")
    assert (step["first build after"], step["last build before"]) == ("1.9.0", "1.8.0")
    assert float(step["level change"].rstrip("%")) < -5
    flat = pd.DataFrame([{**r, "samples_per_sec": 1000 * (1 + rng.normal(0, CV))} for r in rows])
    assert step_table(flat)["first build after"].tolist() == ["none"]


def test_the_alert_names_variant_baseline_change_builds_and_runs():
    from mxbench.regression.regression_rule import alert, dag_run_findings

    rng = np.random.default_rng(7)
    base, ids = history(rng, 1000.0)
    baseline = pd.DataFrame({"run_id": ids, "samples_per_sec": base, "mxnet_package": "mxnet==1.9.0"})
    runs = pd.DataFrame({"variant": "cpu1-bs64", "launcher": "local", "status": "ok",
                         "samples_per_sec": current(rng, 850.0)})
    (finding,) = dag_run_findings(runs, {("cpu1-bs64", "local"): baseline})
    text = alert([finding.to_dict()], "mxnet==1.9.1")
    assert text.startswith("REGRESSION cpu1-bs64 (local): regression:") and "%" in text and "95% CI" in text
    assert "this build: mxnet==1.9.1" in text and "baseline builds: mxnet==1.9.0" in text
    assert "baseline runs: run0, run1, run2, run3, run4" in text
    assert alert([{**finding.to_dict(), "status": "ok"}], "x") is None


def test_the_step_finder_groups_a_history_csv_by_what_ran():
    """A history.csv as check_regressions writes it: every DAG run asked for mxnet==1.9.0, the
    last two ran 1.9.1 and were slower. One written before runs said what they ran (no
    mxnet_reported, no build) is grouped by its DAG runs' versions instead."""
    from mxbench.report import step_table, with_build

    rng = np.random.default_rng(8)
    rows = []
    for day, (reported, mean) in enumerate([("1.9.0", 1000), ("1.9.0", 1000), ("1.9.1", 850), ("1.9.1", 850)]):
        for value in current(rng, mean):
            rows.append({"variant": "cpu1-bs64", "launcher": "local", "environment": "aaaa", "status": "ok",
                         "run_id": f"day{day}", "when": pd.Timestamp("2026-11-01") + pd.Timedelta(days=day),
                         "samples_per_sec": value,
                         "mxnet_package": "mxnet==1.9.0", "mxnet_version": reported, "mxnet_reported": reported})
    history = pd.DataFrame(rows)
    (step,) = step_table(with_build(history)).to_dict("records")
    assert (step["first build after"], step["last build before"]) == ("1.9.1", "1.9.0")
    older = history.drop(columns=["mxnet_reported"])
    assert with_build(older)["build"].tolist() == history["mxnet_reported"].tolist()
    assert set(with_build(older.drop(columns=["mxnet_version"]))["build"]) == {"mxnet==1.9.0"}
