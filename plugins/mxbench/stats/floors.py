"""The exact tests' floors: the fewest repeats each test needs before it can reach α at all.

An exact test's p-value can be no smaller than (observed arrangement and its mirror) / (all
arrangements), so a few repeats cannot call any gap, however large. The form, the report and the
verdicts take the repeats needed from here, never typed by hand. Pure ``math``: the trigger form
imports it while the DAG is parsed.
"""
import math

ALPHA = 0.05  # significance level of the verdicts' tests
MIN_REPEATS = 3  # per side (or rounds, paired), below which no verdict is given


def smallest_p(n: int, m: int) -> float:
    """The smallest two-sided p an exact permutation test of n vs m repeats can give."""
    return min(1.0, 2 / math.comb(n + m, n))


def repeats_needed(alpha: float = ALPHA) -> int:
    """Repeats a side (equal sides) before the permutation test can reach ``alpha`` at all
    (4 at α = 0.05: 2 / C(8, 4) = 0.029)."""
    k = MIN_REPEATS
    while smallest_p(k, k) > alpha:
        k += 1
    return k


def smallest_paired_p(rounds: int) -> float:
    """The smallest two-sided p an exact sign-flip test over ``rounds`` pairs can give: every
    log ratio of one sign, 2 of the 2^rounds sign patterns as extreme."""
    return min(1.0, 2 / 2 ** rounds)


def rounds_needed(alpha: float = ALPHA) -> int:
    """Rounds (one run of each launcher) before the paired sign-flip test, which a paired verdict
    falls back to when its log ratios fail the normality check, can reach ``alpha`` at all (6 at
    α = 0.05: 2 / 2^6 = 0.031; 5 rounds give no less than 0.0625)."""
    k = MIN_REPEATS
    while smallest_paired_p(k) > alpha:
        k += 1
    return k
