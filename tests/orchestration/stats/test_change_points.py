"""Change points over a series' whole history, on seeded series: a planted step, a planted
gradual drift (five builds 1% slower each) and noise alone; then as the history page and the
regression report use them (``judge_history``, ``step_table``)."""
import numpy as np
import pandas as pd

from mxbench.stats.change_points import change_points, mark_change_points

NOISE = 0.01  # per point: a DAG run's median of a few repeats on a quiet machine


def series(rng, n, noise=NOISE, level=1000.0):
    return level * np.exp(rng.normal(0, noise, n))


def test_a_planted_step_gives_one_change_point_at_the_first_slower_point():
    rng = np.random.default_rng(1)
    speeds = series(rng, 20)
    speeds[12:] *= 0.95
    (found,) = change_points(speeds).to_dict("records")
    assert found["index"] == 12 and -0.07 < found["shift"] < -0.03 and found["p_value"] < 0.01


def test_a_planted_step_is_found_at_its_point_in_nearly_every_seeded_series():
    hits = 0
    for seed in range(200):
        speeds = series(np.random.default_rng(seed), 20)
        speeds[10:] *= 0.95
        found = change_points(speeds)
        hits += list(found["index"]) == [10]
    assert hits >= 0.9 * 200  # measured: about 97%


def test_a_gradual_drift_is_a_change_inside_the_ramp_and_nowhere_else():
    rng = np.random.default_rng(2)
    speeds = series(rng, 25, noise=0.003)
    for build in range(10, 15):  # five builds, each 1% slower than the one before
        speeds[build:] *= 0.99
    found = change_points(speeds)
    assert not found.empty
    assert found["index"].between(10, 15).all()
    assert found["shift"].sum() < -0.03  # most of the 4.9% it adds up to


def test_noise_alone_rarely_gives_a_change_point():
    with_change = sum(not change_points(series(np.random.default_rng(seed), 20)).empty for seed in range(300))
    assert with_change <= 0.08 * 300  # measured: about 3.5%
    assert change_points(series(np.random.default_rng(7), 30)).empty


def test_a_flat_history_or_too_short_a_series_has_none():
    assert change_points([1000.0] * 12).empty  # no noise at all: the noise floor, not a zero penalty
    assert change_points([1000.0, 900.0, 800.0]).empty  # fewer points than two levels


def test_the_dag_runs_of_a_series_are_marked_with_the_build_before_and_after():
    rng = np.random.default_rng(3)
    rows = []
    for day in range(10):
        build, level = ("1.9.0", 1000.0) if day < 6 else ("1.9.1", 900.0)
        for repeat, speed in enumerate(series(rng, 4, level=level)):
            rows.append({"run_id": f"day{day}", "when": pd.Timestamp("2026-11-01", tz="UTC") + pd.Timedelta(days=day),
                         "status": "ok", "samples_per_sec": speed, "build": build, "repeat": repeat})
    rows.append({**rows[0], "status": "failed", "samples_per_sec": None})  # a failed run counts for nothing
    marked = mark_change_points(pd.DataFrame(rows), ["run_id"])
    assert marked["run_id"].tolist() == [f"day{d}" for d in range(10)]
    (changed,) = marked[marked["change_point"].notna()].to_dict("records")
    assert (changed["run_id"], changed["build"], changed["previous_build"]) == ("day6", "1.9.1", "1.9.0")
    assert -0.13 < changed["change_point"] < -0.07


def test_the_history_and_the_step_finder_show_the_change_point():
    from mxbench.regression.regression_rule import judge_history
    from mxbench.report import step_table

    rng = np.random.default_rng(4)
    rows = []
    for launcher in ("local", "ssh"):
        for day in range(12):
            drop = launcher == "local" and day >= 8
            build = "1.9.1" if day >= 8 else "1.9.0"
            for speed in series(rng, 4, level=900.0 if drop else 1000.0):
                rows.append({"dag_id": "mxbench_regression", "run_id": f"scheduled__day{day}", "variant": "cpu1-bs64",
                             "launcher": launcher, "environment": "aaaa", "status": "ok", "samples_per_sec": speed,
                             "when": pd.Timestamp("2026-11-01", tz="UTC") + pd.Timedelta(days=day), "build": build})
    judged = judge_history(pd.DataFrame(rows))
    changed = judged[judged["change_point"].notna()]
    assert set(zip(changed["launcher"], changed["run_id"])) == {("local", "scheduled__day8")}
    steps = step_table(judged).set_index("launcher")
    assert steps.loc["local", "first build after"] == "1.9.1" and steps.loc["local", "last build before"] == "1.9.0"
    assert steps.loc["local", "DAG run"] == "scheduled__day8" and steps.loc["local", "level change"].startswith("-")
    assert steps.loc["local", "alert"] == "regression"  # the rule, judging day 8 against days 3-7, alerted too
    assert steps.loc["ssh", "first build after"] == "none"
