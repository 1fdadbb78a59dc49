"""The launcher verdict: is a gap real or run-to-run noise? Simulated repeats, seeded."""
import numpy as np
import pandas as pd
import pytest

from mxbench.metrics import launcher_ratios, leg_order, summarise, throughput_check
from mxbench.verdict import compare, min_detectable, smallest_p


def repeats(rng, mean, cv, n):
    return mean * (1 + rng.normal(0, cv, n))


def test_identical_launchers_get_no_verdict_of_difference_in_95_percent_of_trials():
    rng = np.random.default_rng(1)
    called = [compare(repeats(rng, 8000, 0.02, 5), repeats(rng, 8000, 0.02, 5), "k8s", "ssh").outcome
              for _ in range(1000)]
    false_alarms = sum(o in ("slower", "faster") for o in called)
    assert false_alarms <= 50, f"{false_alarms} of 1000 identical pairs called different"
    assert "within noise" in called  # the common answer, not a refusal to answer


def test_a_5_percent_gap_at_cv_1_percent_and_5_repeats_is_detected():
    rng = np.random.default_rng(2)
    results = [compare(repeats(rng, 7600, 0.01, 5), repeats(rng, 8000, 0.01, 5), "k8s", "ssh")
               for _ in range(200)]
    assert sum(r.outcome == "slower" for r in results) >= 195
    covered = sum(r.ci_low <= 0.95 <= r.ci_high for r in results)
    assert covered >= 0.9 * len(results)  # the interval holds the true ratio about as often as it says
    r = results[0]
    assert r.verdict.startswith(f"k8s at {r.ratio:.1%} of ssh, 95% CI [")
    assert "5 vs 5 repeats: slower, not explained by noise (p = 0.008 < α = 0.05)" in r.verdict


def test_the_seed_studys_single_pair_is_too_few_repeats():
    r = compare([7586.296786], [8010.492], "k8s", "ssh")
    assert r.outcome == "too few repeats" and r.p_value is None and r.ci_low is None
    assert r.verdict == "k8s at 94.7% of ssh, 1 vs 1 repeats: too few repeats to tell (at least 3 a side)"


def test_within_noise_says_how_large_a_gap_it_rules_out():
    rng = np.random.default_rng(3)
    a, b = repeats(rng, 8000, 0.02, 6), repeats(rng, 8000, 0.02, 6)
    r = compare(a, b, "k8s", "ssh")
    assert r.outcome == "within noise"
    assert f"a gap of {r.min_detectable:.1%} or more would have been detected (80% power)" in r.verdict
    # the detectable gap grows with the spread and shrinks with the repeats
    assert min_detectable(a * [1, 1.05, 1, 0.95, 1, 1], b) > r.min_detectable
    assert min_detectable(np.tile(a, 3), np.tile(b, 3)) < r.min_detectable


def test_three_repeats_a_side_cannot_reach_alpha_and_the_verdict_says_so():
    assert smallest_p(3, 3) == pytest.approx(0.1) and smallest_p(4, 4) < 0.05
    r = compare([7586, 7600, 7570], [8010, 8000, 8020], "k8s", "ssh")
    assert r.outcome == "undecidable at this n" and r.p_value == pytest.approx(0.1)
    assert "run at least 4 a side" in r.verdict and r.min_detectable is None


def test_a_rebuilt_report_gets_the_same_interval():
    a, b = [7586, 7600, 7570, 7590], [8010, 8000, 8020, 7990]
    assert compare(a, b) == compare(a, b)


def runs(rows):
    return pd.DataFrame([{"status": "ok", "setup": "s", "num_layers": 8, "devices": 1, "batch_size": 32,
                          "batch_per_device": 32, "sec_per_epoch": 1.0, "gpu_util_pct": None,
                          "gpu_mem_mib": None, "validation_accuracy": 0.5, **r} for r in rows])


def legs(starts):
    """(launcher, repeat, start) -> runs of 10 s each."""
    return runs([{"variant": "v", "launcher": launcher, "repeat": r, "started_at": t, "ended_at": t + 10,
                  "samples_per_sec": 8000.0 if launcher == "ssh" else 7600.0} for launcher, r, t in starts])


def test_the_ratio_table_says_how_the_legs_were_ordered():
    interleaved = legs([("ssh", 1, 0), ("k8s", 1, 20), ("ssh", 2, 40), ("k8s", 2, 60), ("ssh", 3, 80),
                        ("k8s", 3, 100)])
    (row,) = launcher_ratios(interleaved).to_dict("records")
    assert row["order"] == "interleaved (ssh r1, k8s r1, ssh r2, k8s r2, ssh r3, k8s r3)"
    assert row["n"] == 3 and row["alpha"] == 0.05 and row["level"] == 0.95
    blocked = legs([("ssh", 1, 0), ("ssh", 2, 20), ("ssh", 3, 40), ("k8s", 1, 60), ("k8s", 2, 80),
                    ("k8s", 3, 100)])
    assert leg_order(blocked, "k8s", "ssh").startswith("blocked: all ssh first, then all k8s")
    overlapping = legs([("ssh", 1, 0), ("k8s", 1, 5), ("ssh", 2, 40), ("k8s", 2, 60)])
    assert leg_order(overlapping, "k8s", "ssh").startswith("overlapping")


def test_throughput_two_ways_and_the_flag_when_they_disagree():
    assert throughput_check(1000.0, 950.0) == ""
    assert throughput_check(1200.0, 1000.0) == ("Speedometer samples/s is 20% above images/epoch ÷ s/epoch "
                                                "(more than 10% apart)")
    summary = summarise(runs([{"variant": "v", "launcher": "local", "samples_per_sec": s,
                               "epoch_samples_per_sec": e, "warmup_excluded": w}
                              for s, e, w in ((1200, 1000, False), (1210, 1010, False), (1190, 990, False))]))
    (row,) = summary.to_dict("records")
    assert row["epoch_samples_per_sec"] == 1000 and "20% above" in row["throughput_check"]
    assert row["warmup_excluded"] is False


def test_the_detectable_gap_is_what_the_rule_really_detects():
    from mxbench.verdict import _called

    rng = np.random.default_rng(4)
    a, b = repeats(rng, 8000, 0.02, 5), repeats(rng, 8000, 0.02, 5)
    gap = min_detectable(a, b)
    sd = np.sqrt((np.log(a).var(ddof=1) + np.log(b).var(ddof=1)) / 2)
    fresh = np.random.default_rng(5)
    found = np.mean([_called(np.exp(fresh.normal(0, sd, 5)) / (1 + gap), np.exp(fresh.normal(0, sd, 5)), 0.05, 0.95)
                     for _ in range(300)])
    assert 0.7 <= found <= 0.9  # 80% power, up to the simulations' own noise


def test_no_interval_below_three_repeats_and_no_measure_from_nan_or_inf():
    r = compare([7586.0, 7600.0], [8010.0, 8000.0], "k8s", "ssh")
    assert r.ci_low is None and r.outcome == "too few repeats"  # a 2 vs 2 bootstrap covers ~70%, not 95%
    r = compare([7586.0, 7600.0, 7590.0, float("inf"), float("nan")], [8010.0, 8000.0, 7990.0], "k8s", "ssh")
    assert (r.n, r.n_reference) == (3, 3)
    flat = compare([8000.0] * 5, [8000.0] * 5, "k8s", "ssh")
    assert flat.outcome == "within noise" and flat.min_detectable is None
    assert flat.verdict.endswith("the repeats show no spread to judge a gap by")
