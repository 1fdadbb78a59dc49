"""A/A calibration: each launcher as two arms in the same rounds, compared with itself; the noise
floor (spread and drift per run) it measures, the false calls it counts, and where later
verdicts and the regression check use it."""
import math

import numpy as np
import pandas as pd
import pytest

from mxbench.matrix.params import PARAMS_SCHEMA, REGRESSION_PARAMS_SCHEMA
from mxbench.matrix.variants import Target, expand_runs, leg, stop_budget
from mxbench.regression import regression_rule
from mxbench.results import calibration
from mxbench.results.metrics import launcher_pairs, launcher_ratios
from mxbench.stats.verdict import ALPHA

TARGETS = {"local": Target("local", 2, 0, one_machine=True), "ssh": Target("ssh", 2, 0)}


def test_each_launcher_runs_as_two_arms_spaced_like_real_pairs_abba_over_the_rounds():
    runs = expand_runs({"preset": "cpu-demo", "only_variants": ["cpu1-bs64"], "launchers": ["local", "ssh"],
                        "repeats": 4, "aa_calibration": True}, TARGETS)
    by_round = {}
    for run in runs:
        by_round.setdefault(run["round"], []).append(leg(run))
    # each arm pair has the other launcher's run between it, as real pairs of three launchers do
    assert by_round == {1: ["local", "ssh", "local-b", "ssh-b"], 2: ["ssh-b", "local-b", "ssh", "local"],
                        3: ["ssh-b", "local-b", "ssh", "local"], 4: ["local", "ssh", "local-b", "ssh-b"]}
    assert {run["launcher"] for run in runs} == {"local", "ssh"}  # an arm runs under its own launcher
    assert "cpu1-bs64__ssh-b__r2" in {run["key"] for run in runs}
    assert [run["position"] for run in runs if run["round"] == 2] == [1, 2, 3, 4]


def test_one_launchers_arms_are_spaced_by_the_next_variants_run_and_each_machine_set_apart():
    preset = expand_runs({"preset": "aa-calibration", "launchers": ["local"], "repeats": 2}, TARGETS)
    first = [r["key"].removesuffix("__r1") for r in preset if r["round"] == 1]
    assert first == ["cpu1-bs64__local", "cpu2w-bs64__local", "cpu1-bs64__local-b", "cpu2h-bs64__local",
                     "cpu2w-bs64__local-b", "cpu2h-bs64__local-b"]  # one or two runs apart, as real pairs
    sets = {"here": ["local"], "there": ["ssh"]}
    apart = expand_runs({"preset": "cpu-demo", "only_variants": ["cpu1-bs64"], "launchers": ["local", "ssh"],
                         "repeats": 1, "aa_calibration": True}, TARGETS, sets=sets)
    # each set queues its own runs: the arms of a set's lone launcher can only run back to back
    assert [leg(r) for r in apart] == ["local", "local-b", "ssh", "ssh-b"]


def test_the_preset_turns_calibration_on_and_plain_runs_have_no_arm():
    preset = expand_runs({"preset": "aa-calibration", "launchers": ["local"], "repeats": 1}, TARGETS)
    assert sorted(leg(r) for r in preset) == ["local"] * 3 + ["local-b"] * 3
    # the demo's variant and the regression DAG's, so that each gets a noise estimate
    assert {r["variant"]["id"] for r in preset} == {"cpu1-bs64", "cpu2w-bs64", "cpu2h-bs64"}
    assert set(REGRESSION_PARAMS_SCHEMA["only_variants"]["default"]) <= {r["variant"]["id"] for r in preset}
    plain = expand_runs({"preset": "cpu-demo", "only_variants": ["cpu1-bs64"], "launchers": ["local"],
                         "repeats": 2}, TARGETS)
    assert all("arm" not in r for r in plain) and [r["key"] for r in plain] == ["cpu1-bs64__local__r1",
                                                                                 "cpu1-bs64__local__r2"]
    assert PARAMS_SCHEMA["aa_calibration"]["default"] is False
    # a regression run compares builds, not arms: neither the option nor the preset
    assert "aa_calibration" not in REGRESSION_PARAMS_SCHEMA
    assert "aa-calibration" not in REGRESSION_PARAMS_SCHEMA["preset"]["enum"]
    assert "aa-calibration" in PARAMS_SCHEMA["preset"]["enum"]


def test_arms_are_compared_with_their_own_launcher_only():
    assert launcher_pairs(["local", "ssh", "kubernetes"]) == [("ssh", "local"), ("kubernetes", "local"),
                                                              ("kubernetes", "ssh")]
    assert launcher_pairs(["local", "local-b", "ssh", "ssh-b"]) == [("local-b", "local"), ("ssh-b", "ssh")]


def aa_runs(rng, rounds, cv, drift, arm_gap=0.0, variant="v", launcher="local"):
    """A runs table of one A/A pair run ABBA: log speed = noise + drift x (run's place in time)."""
    rows, t = [], 0
    for r in range(1, rounds + 1):
        order = (launcher, launcher + "-b") if r % 4 in (1, 0) else (launcher + "-b", launcher)
        for name in order:
            down = math.log1p(arm_gap) if name.endswith("-b") else 0.0
            speed = 1000 * math.exp(rng.normal(0, cv) + drift * t - down)
            start = pd.Timestamp(2026, 1, 1) + pd.Timedelta(seconds=10 * t)
            rows.append({"variant": variant, "launcher": name, "repeat": r, "status": "ok", "samples_per_sec": speed,
                         "started_at": start, "ended_at": start + pd.Timedelta(seconds=9)})
            t += 1
    return pd.DataFrame(rows)


def test_the_noise_floor_recovers_the_drift_and_spread_it_was_given():
    runs = aa_runs(np.random.default_rng(3), 40, cv=0.02, drift=0.004, arm_gap=0.05)
    ratios = launcher_ratios(runs)
    assert ratios.iloc[0]["analysis"].startswith("paired, 40 rounds")
    floor = calibration.noise_floor(runs, ratios).iloc[0]
    assert (floor["variant"], floor["launcher"], floor["runs"], floor["rounds"]) == ("v", "local", 80, 40)
    assert floor["drift_per_run"] == pytest.approx(0.004, abs=0.0005)
    assert floor["cv"] == pytest.approx(0.02, rel=0.2)  # the arms' 5% gap is fitted apart, not spread
    # arms that differ by 5% at 2% noise over 40 rounds: called, and so counted as a false call
    assert floor["outcome"] == "slower" and bool(floor["false_call"])
    assert calibration.false_calls(calibration.noise_floor(runs, ratios)) == (1, 1)


def test_identical_arms_are_called_different_about_alpha_of_the_time():
    rng = np.random.default_rng(11)
    floors = []
    for _ in range(60):
        runs = aa_runs(rng, 6, cv=0.02, drift=0.005)
        floors.append(calibration.noise_floor(runs, launcher_ratios(runs)))
    called, judged = calibration.false_calls(pd.concat(floors))
    assert judged == 60 and called <= 8  # α = 5%: 3 expected; 8 or more has p < 0.01
    assert calibration.false_call_p(8, 60) < 0.01 < calibration.false_call_p(6, 60)
    assert calibration.false_call_p(0, 60) == pytest.approx(1.0)
    assert calibration.false_call_p(1, 1) == pytest.approx(ALPHA)


def test_the_drift_is_per_run_of_the_machines_not_of_one_pair():
    """Two variants take turns: each pair's runs are every other run of the machines."""
    rng = np.random.default_rng(7)
    runs = pd.concat([aa_runs(rng, 30, 0.005, 0.004, variant=v) for v in ("v", "w")])
    # interleave the variants in time as round-major expansion does: v's round, then w's
    runs["started_at"] = [pd.Timestamp(2026, 1, 1) + pd.Timedelta(seconds=10 * (2 * i + (v == "w")))
                          for v, i in zip(runs["variant"], runs.groupby("variant").cumcount())]
    # the speeds drifted 0.004 per run of each pair, so 0.002 per run of the machines
    floors = calibration.noise_floor(runs, launcher_ratios(runs)).set_index("variant")
    assert floors.loc["v", "drift_per_run"] == pytest.approx(0.002, abs=0.0003)
    assert floors.loc["w", "drift_per_run"] == pytest.approx(0.002, abs=0.0003)


def test_beside_each_ratio_the_noise_of_both_launchers_and_the_false_calls():
    rng = np.random.default_rng(5)
    noise = pd.concat([calibration.noise_floor(r, launcher_ratios(r))
                       for r in (aa_runs(rng, 6, 0.01, 0.0), aa_runs(rng, 6, 0.03, 0.0, launcher="ssh"))])
    noise = noise.assign(dag_run="mxbench_benchmark/aa1", measured_at="2026-12-01T10:00:00+00:00")
    ratios = pd.DataFrame([{"variant": "v", "launcher": "ssh", "reference": "local"},
                           {"variant": "w", "launcher": "ssh", "reference": "local"}])
    shown = calibration.beside(ratios, calibration.Stored(noise, "the latest A/A calibration on this hardware"))
    first, second = shown["noise_floor"]
    assert first.startswith("A/A noise (the latest A/A calibration on this hardware): local CV ")
    assert "; ssh CV " in first and "(mxbench_benchmark/aa1, 2026-12-01)" in first
    assert first.endswith(f"false calls: {calibration.false_calls(noise)[0]} of 2 A/A comparisons")
    assert second == "no A/A calibration of w under local or ssh on these machines yet"
    none = calibration.beside(ratios, None)
    assert set(none["noise_floor"]) == {"no A/A calibration on this hardware yet (the aa-calibration preset "
                                        "measures one)"}
    failed = calibration.beside(ratios, calibration.Stored(None, "", unavailable="A/A noise not shown: store down"))
    assert set(failed["noise_floor"]) == {"A/A noise not shown: store down"}


def test_the_latest_calibration_wins():
    rng = np.random.default_rng(2)
    old = calibration.noise_floor(r := aa_runs(rng, 6, 0.05, 0.0), launcher_ratios(r)).assign(
        measured_at="2026-11-01T00:00:00+00:00")
    new = calibration.noise_floor(r := aa_runs(rng, 6, 0.01, 0.0), launcher_ratios(r)).assign(
        measured_at="2026-12-01T00:00:00+00:00")
    latest = calibration.latest(pd.concat([new, old]))
    assert len(latest) == 1 and latest.iloc[0]["cv"] == pytest.approx(new.iloc[0]["cv"])


def test_the_regression_check_takes_the_a_a_spread_as_its_noise_estimate():
    runs = pd.DataFrame([{"variant": "v", "launcher": "local", "status": "ok", "samples_per_sec": s}
                         for s in (100, 101, 99, 100)])
    base = pd.DataFrame([{"run_id": f"r{i}", "samples_per_sec": s} for i, s in enumerate((100, 102, 98, 100, 101))])
    quiet, noisy = ({("v", "local"): {"cv": cv, "dag_run": "mxbench_benchmark/aa1"}} for cv in (0.01, 0.05))
    low = regression_rule.dag_run_findings(runs, {("v", "local"): base}, noise=quiet)[0]
    high = regression_rule.dag_run_findings(runs, {("v", "local"): base}, noise=noisy)[0]
    assert low.noise_cv == 0.01 and low.noise_from == "mxbench_benchmark/aa1"
    # 4 vs 5 repeats at 5%: (1.96 + 0.84) x 0.05 x sqrt(1/4 + 1/5) = 9.4% in log terms
    assert high.detectable == pytest.approx(-math.expm1(-2.8016 * 0.05 * math.sqrt(0.45)), rel=1e-3)
    assert regression_rule.detectable_drop(0.01, 4, 5) == pytest.approx(-math.expm1(-2.8016 * 0.01 * math.sqrt(0.45)),
                                                                   rel=1e-3)
    # at 1% the repeats would detect 1.9%, but nothing under the minimum drop is alerted
    assert low.detectable == regression_rule.MIN_DROP
    assert ("A/A within-run noise CV 1.0% per run (mxbench_benchmark/aa1): 4 vs 5 repeats detect a drop of 5.0% "
            "or more (the minimum drop alerted)") in low.message
    assert "(the minimum drop" not in high.message
    bare = regression_rule.dag_run_findings(runs, {("v", "local"): base})[0]
    assert bare.noise_cv is None and "A/A" not in bare.message
    young = regression_rule.dag_run_findings(runs, {("v", "local"): base.head(0)}, noise=quiet)[0]
    assert young.status == "no baseline yet" and young.detectable is None and "A/A" not in young.message


def test_a_stopping_budget_is_read_from_the_params():
    assert stop_budget({"repeats": 6, "max_repeats": 9, "target_gap": 0.1}) == (6, 9, 0.1, 4)
    assert stop_budget({"repeats": 6}) is None


def test_the_report_weighs_the_false_calls_against_alpha():
    from mxbench.report.tables import aa_lines

    rng = np.random.default_rng(4)
    runs = aa_runs(rng, 40, cv=0.02, drift=0.0, arm_gap=0.05)
    noise = calibration.noise_floor(runs, launcher_ratios(runs))
    lines = aa_lines(noise)
    assert lines[0] == ("False calls: 1 of 1 A/A comparisons called the two arms of one launcher different (v local); "
                        "the rule allows α = 0.05 each: 0.05 expected, and 1 or more happen with probability 0.05 "
                        "if it holds.")
    assert lines[1].startswith("Noise floor per run: v local: CV 2.")
    quiet = noise.assign(false_call=False)
    assert aa_lines(quiet)[0].endswith("the rule allows α = 0.05 each: 0.05 expected.")
