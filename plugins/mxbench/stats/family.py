"""Many verdicts at once: adjusted p-values for a family of tests.

One report prints a verdict line per variant and launcher pair, and one regression check judges
every series of its DAG run. Each line alone holds α, but the more lines, the likelier one of
them is a false call: three identical launchers give three lines, and at least one of them
called different in about 13% of reports at α = 5%. Adjusting the p-values over the family keeps
that in check:

- ``holm``: Holm's step-down adjustment, which keeps the chance of any false call in the family
  at α or below, whatever the tests' dependence (the report's launcher lines: three pairs of one
  variant share their launchers' runs);
- ``benjamini_hochberg``: keeps the expected share of false calls among the calls at α (the
  regression check's many series, where a few real regressions should not hide each other).

What a line can detect under the family: Holm calls a line whenever its p is below α/m (m the
tested lines), whatever the others show. So the printed detectable gap is computed at α/m
(``detection_alpha``): a gap the whole rule finds with at least 80% power wherever the other
lines lie. It is close, not loose: three launchers' lines cannot all be without a gap, and where
the others help least (the third launcher midway, their gaps half as large) the rule's own
80%-power gap lies within 15% below the printed one (seeded,
``tests/orchestration/results/test_verdict_lines.py``). Computed at α instead, it understated the
Holm line's real 80%-power gap by about 1.3x (3.8% printed where 5.2% was needed, CV 2%).

Why not test the headline k8s/ssh line first at full α (a fixed sequence, the other two lines
Holm-adjusted only once it is called): it keeps the headline's unadjusted power and the report's
false-call rate at α, but when k8s and ssh are alike (no gap to call) the other two lines can
never be called at all, whatever their gaps; one line's resolution is not worth two lines' blindness.

Pure Python: no numpy.
"""
from typing import List, Sequence


def holm(p_values: Sequence[float]) -> List[float]:
    """Holm's adjusted p-values, in the order given: calling every adjusted p < α keeps the
    family-wise error rate (any false call among them) at α."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [1.0] * m, 0.0
    for rank, i in enumerate(order):  # from the smallest p up: adjusted p is monotone in p
        running = max(running, (m - rank) * p_values[i])
        adjusted[i] = min(1.0, running)
    return adjusted


def benjamini_hochberg(p_values: Sequence[float]) -> List[float]:
    """The Benjamini–Hochberg adjusted p-values (q), in the order given: calling every q < α keeps
    the expected share of false calls among the calls at α or below."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    q, running = [1.0] * m, 1.0
    for rank in range(m, 0, -1):  # from the largest p down: q is monotone in p
        i = order[rank - 1]
        running = min(running, p_values[i] * m / rank)
        q[i] = min(1.0, running)
    return q


def detection_alpha(alpha: float, tested: int, method: str = "holm") -> float:
    """The level at which ``method`` calls one of ``tested`` lines whatever the other lines show:
    α/m for Holm (its first step; a Bonferroni bound), and for Benjamini–Hochberg (its step for
    the one line called alone). The detectable gap printed beside a line is computed here."""
    if method not in METHODS:
        raise ValueError(f"unknown family method {method!r}; known: {', '.join(METHODS)}")
    return alpha / max(1, tested)


METHODS = {"holm": holm, "benjamini-hochberg": benjamini_hochberg}
NAMES = {"holm": "Holm", "benjamini-hochberg": "Benjamini–Hochberg"}
