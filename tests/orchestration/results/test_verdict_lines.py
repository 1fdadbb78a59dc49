"""Every verdict line sound (issue 31 §4), through the launcher table itself: each pair judged on
the rounds its own plan asked for, and the report's lines controlled as one family. Seeded."""
import math

import numpy as np
import pandas as pd
import pytest

from mxbench.matrix.variants import round_order
from mxbench.results.metrics import launcher_pairs, launcher_ratios, planned
from mxbench.stats import verdict
from mxbench.stats.verdict import ALPHA, compare_two_stage, t_upper_tail

LAUNCHERS = ["local", "ssh", "kubernetes"]
CALLED = ("slower", "faster")
QUIET = [0.03, -0.03, 0.02, -0.02, 0.01, -0.01]  # the issue's six quiet rounds' log ratios


def rounds_table(speeds, launchers=LAUNCHERS, variant="v"):
    """Runs of ``speeds`` (rounds x launchers, samples/s) in counterbalanced order, one after another."""
    rows, t = [], 0.0
    for r, row in enumerate(speeds, start=1):
        for launcher in round_order(launchers, r):
            rows.append({"variant": variant, "launcher": launcher, "repeat": r, "status": "ok",
                         "samples_per_sec": float(row[launchers.index(launcher)]), "started_at": t,
                         "ended_at": t + 0.5})
            t += 1.0
    return pd.DataFrame(rows)


def test_a_round_another_pair_needed_is_reported_with_this_pair_not_judged_in_it():
    """The issue's reproduction: six quiet rounds of ssh against local plan 6 rounds; the 7th ran
    because kubernetes' noisier first rounds planned 7, and it is 700 vs 1000 samples/s."""
    noisy = [1.0, 1.2, 0.85, 1.15, 0.9, 1.1, 1.0]
    speeds = [[1000.0, 1000.0 * math.exp(d), 1000.0 * k] for d, k in zip(QUIET, noisy)] + [[1000.0, 700.0, 1000.0]]
    ratios = launcher_ratios(rounds_table(speeds), budget=(6, 7, 0.15)).set_index("launcher")
    ssh = ratios.loc["ssh"]
    assert ssh["n"] == 6 and ssh["outcome"] == "within the band"
    assert ssh["stopping"].endswith("; 1 more ran, as another pair of the variant needed (round 7 at 70.0%): "
                                    "reported, not in this pair's verdict")
    six = launcher_ratios(rounds_table(speeds[:6]), budget=(6, 7, 0.15)).set_index("launcher").loc["ssh"]
    assert (six["ratio"], six["p_value"], six["outcome"]) == (ssh["ratio"], ssh["p_value"], ssh["outcome"])
    assert (ratios.loc["kubernetes", "n"] == 7).all()  # kubernetes' own plan asked for the 7th
    # the landed rule put the 7th into the mean and took the spread from rounds 1-6: 'slower, p = 0.002'
    seven = np.array(QUIET + [math.log(0.7)])
    assert 2 * t_upper_tail(abs(seven.mean()) * math.sqrt(7) / np.std(seven[:6], ddof=1), 5) == pytest.approx(
        0.002, abs=0.0005)
    # and judged over seven rounds now, the slow one fails the normality check: the sign-flip test decides
    mixed = compare_two_stage([(1000.0 * math.exp(d), 1000.0) for d in seven], 6)
    assert mixed.outcome not in CALLED and "sign-flip test (the log ratios fail the normality check" in mixed.analysis


def test_three_identical_launchers_give_a_false_line_in_at_most_alpha_of_reports():
    """Three lines a report: each alone holds α, but one of the three is called in about 10% of
    reports; Holm over the report's lines brings that to α or below."""
    rng = np.random.default_rng(31)
    reports = 400
    any_called = any_alone = 0
    for _ in range(reports):
        ratios = launcher_ratios(rounds_table(1000.0 * np.exp(rng.normal(0, 0.02, (6, 3)))))
        assert len(ratios) == 3 and (ratios["family"] == "Holm over the report's 3 verdict lines").all()
        any_called += ratios["outcome"].isin(CALLED).any()
        alone = (ratios["p_value"] < ALPHA) & ~((ratios["ci_low"] <= 1) & (ratios["ci_high"] >= 1))
        any_alone += alone.any()
    bound = ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / reports)
    assert any_called / reports <= bound, any_called
    assert any_alone / reports >= 0.08, any_alone  # uncontrolled, the family's rate is about twice α


def test_a_line_called_alone_but_not_across_the_family_says_so():
    speeds = [[1000.0, 1000.0 * math.exp(d), 1000.0] for d in (-0.03, -0.01, -0.02, 0.002, -0.025, -0.012)]
    ratios = launcher_ratios(rounds_table(speeds)).set_index("launcher")
    ssh = ratios.loc["ssh"]
    assert ssh["p_value"] < ALPHA <= ssh["p_adjusted"] and ssh["outcome"] == "borderline"
    assert "alone, but not across the family: Holm over the report's 3 verdict lines, adjusted p = " in ssh["verdict"]


def slow_runs(rng, rounds, cv=0.02, share=0.05, slow=0.3):
    """Rounds x 3 launchers of identical speeds, a run now and then 30% slow (the A/A figures' outliers)."""
    noise = rng.normal(0, cv, (rounds, 3)) + np.where(rng.random((rounds, 3)) < share, math.log1p(-slow), 0.0)
    return 1000.0 * np.exp(noise)


def two_stage_false_calls(rng, budget, trials, own_plan=True):
    """(share of lines called different, of them the share among lines whose variant ran more
    rounds than their own plan, lines) among identical launchers with slow runs, each pair judged
    on its own plan's rounds (``metrics.planned``) or on every round the variant ran."""
    called, extra = [], []
    for _ in range(trials):
        speeds = slow_runs(rng, budget[1])
        pairs = {(a, b): list(zip(speeds[:, LAUNCHERS.index(a)], speeds[:, LAUNCHERS.index(b)]))
                 for a, b in launcher_pairs(LAUNCHERS)}
        plans = {pair: planned(rounds, budget) for pair, rounds in pairs.items()}
        ran = max(plans.values())
        for pair, rounds in pairs.items():
            called.append(compare_two_stage(rounds[:plans[pair] if own_plan else ran], budget[0]).outcome in CALLED)
            extra.append(plans[pair] < ran)
    called, extra = np.array(called), np.array(extra)
    return called.mean(), called[extra].mean(), len(called)


@pytest.mark.parametrize("budget", [(6, 7, 0.15), (6, 12, 0.05)])
def test_slow_runs_do_not_push_a_two_stage_line_over_alpha(budget, monkeypatch):
    rate, _, lines = two_stage_false_calls(np.random.default_rng(7), budget, 500)
    assert rate <= ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / lines), rate
    # the landed rule, a t test whatever the tails over every round the variant ran, called the
    # lines that got a round they had not planned several times as often as α
    monkeypatch.setattr(verdict, "normality_p", lambda d: 1.0)
    _, landed, _ = two_stage_false_calls(np.random.default_rng(7), budget, 500, own_plan=False)
    assert landed > 2 * ALPHA, landed


def holm_power(rng, gap, trials, cv=0.02, rounds=6, local_at=0.5):
    """The share of reports (three launchers, kubernetes ``gap`` slower than ssh, local ``local_at``
    of the way from ssh to kubernetes in log speed) whose k8s/ssh line the full rule (paired test,
    interval, Holm over the three lines) calls slower."""
    called = 0
    for _ in range(trials):
        speeds = 1000.0 * np.exp(rng.normal(0, cv, (rounds, 3)) + [local_at * math.log1p(-gap), 0.0,
                                                                     math.log1p(-gap)])
        ratios = launcher_ratios(rounds_table(speeds)).set_index("launcher")
        line = ratios[ratios["reference"] == "ssh"].loc["kubernetes"]
        called += line["outcome"] == "slower"
    return called / trials


def test_the_printed_detectable_gap_is_the_one_the_family_rule_gives():
    """The issue's finding: at α alone the printed gap understated what the Holm line needs by
    about 1.3x. Printed at the family's level, the whole rule's own 80%-power gap lies within 15%
    below it where the other lines help least (local midway between ssh and kubernetes: their
    gaps are half as large; three launchers' lines cannot all be without a gap), and the rule
    calls the printed gap in at least 80% of reports wherever local lies; the unadjusted figure
    is called in far fewer. Seeded."""
    cv, rounds = 0.02, 6
    sd = cv * math.sqrt(2)  # of a round's log ratio: two independent runs
    printed = math.expm1(sd * verdict._paired_detectable_in_sd(rounds, ALPHA / 3, verdict.POWER, verdict.LEVEL))
    alone = math.expm1(sd * verdict._paired_detectable_in_sd(rounds, ALPHA, verdict.POWER, verdict.LEVEL))
    assert printed > 1.15 * alone  # Holm over three lines costs resolution, and the report says so
    ratios = launcher_ratios(rounds_table(1000.0 * np.exp(np.random.default_rng(5).normal(0, cv, (rounds, 3)))))
    assert list(ratios["detect_alpha"]) == pytest.approx([ALPHA / 3] * 3)
    # the figure printed beside each line is the family-level one at that line's spread
    one = ratios.iloc[0]
    assert "at the family's α = 0.0167" in one["verdict"] or one["outcome"] in CALLED
    power = holm_power(np.random.default_rng(39), printed, 200, cv, rounds)
    assert 0.77 <= power <= 0.93, power
    assert holm_power(np.random.default_rng(39), 0.85 * printed, 200, cv, rounds) < 0.8
    assert holm_power(np.random.default_rng(40), printed, 150, cv, rounds, local_at=0.0) >= 0.8
    assert holm_power(np.random.default_rng(41), alone, 200, cv, rounds) < 0.70


def test_each_answer_row_says_which_rounds_were_contended_and_what_became_of_them():
    from mxbench.report.answer import answer_rows

    rng = np.random.default_rng(8)
    speeds = 1000.0 * np.exp(rng.normal(0, 0.01, (7, 3)))
    runs = rounds_table(speeds)
    runs["contended"] = runs["repeat"].isin([3]) & (runs["launcher"] == "kubernetes")  # a pod read its own pressure
    replaced = launcher_ratios(runs, budget=(6, 8, 0.15, 1)).set_index(["launcher", "reference"])
    assert replaced.loc[("kubernetes", "ssh"), "contended_rounds"] == "round 3, replaced"
    assert pd.isna(replaced.loc[("ssh", "local"), "contended_rounds"])  # neither leg contended there
    tags = {row.pair: row.tags for row in answer_rows(replaced.reset_index(), lambda pair: ["CPU only"])}
    assert tags["kubernetes / ssh"] == ["CPU only", "contended: round 3, replaced"]
    assert tags["ssh / local"] == ["CPU only"]
    runs["contended"] = runs["repeat"].isin([2, 3, 4]) & (runs["launcher"] != "local")
    measured = launcher_ratios(runs.iloc[:18]).set_index(["launcher", "reference"])  # no budget: nothing to replace
    tags = {row.pair: row.tags for row in answer_rows(measured.reset_index(), lambda pair: [])}
    assert tags == {"ssh / local": ["contended: rounds 2-4, judged as measured"],
                    "kubernetes / local": ["contended: rounds 2-4, judged as measured"],
                    "kubernetes / ssh": ["contended: rounds 2-4, judged as measured"]}


def test_the_two_stage_lines_printed_gap_is_its_t_tests_own_at_the_family_level():
    """The two-stage line prints the gap Stein's t test calls in 80% of trials at the family's level
    (the noncentral t, not the sum of quantiles, which understates it at few rounds). Seeded."""
    rng = np.random.default_rng(12)
    sd, first_n, level = 0.03, 6, ALPHA / 3
    printed = math.expm1(verdict._stein_detectable_in_sd(first_n - 1, level, verdict.POWER) * sd / math.sqrt(first_n))
    called = [compare_two_stage([(1000.0 * math.exp(d), 1000.0) for d in rng.normal(math.log1p(-printed), sd, first_n)],
                                first_n, alpha=level).outcome == "slower" for _ in range(1500)]
    assert 0.76 <= np.mean(called) <= 0.84, np.mean(called)
