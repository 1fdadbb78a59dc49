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


METHODS = {"holm": holm, "benjamini-hochberg": benjamini_hochberg}
NAMES = {"holm": "Holm", "benjamini-hochberg": "Benjamini–Hochberg"}
