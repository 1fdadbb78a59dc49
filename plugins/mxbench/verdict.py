"""Is one launcher slower than another, or is it run-to-run noise? Pure statistics over repeats.

- the ratio of median speeds, with a percentile-bootstrap confidence interval over the repeats
  (fixed seed, so a rebuilt report is identical);
- a two-sided permutation test on the log speeds (the mean log ratio), exact while the
  arrangements of the repeats are few enough to enumerate;
- a difference is called only when the test and the interval agree (p < α and the interval
  excludes 100%), which keeps the false-alarm rate under α;
- the minimum detectable difference: the gap this rule would call with 80% power at this n and
  this spread (a seeded simulation of the rule itself), so "within noise" says how large a gap
  it rules out.

Why not "the min-max ranges do not overlap": for two identical launchers that happens by chance
with probability 2 / C(n+m, n), 33% at 2 vs 2 repeats.
"""
import functools
import itertools
import math
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np

LEVEL = 0.95  # confidence level of the interval
ALPHA = 0.05  # significance level of the test
POWER = 0.80  # for the minimum detectable difference
MIN_REPEATS = 3  # per side, below which no verdict is given
SEED = 20161211  # the seed study's MXNet commit date: any fixed number would do
BOOTSTRAP_RESAMPLES = 4000
EXACT_UP_TO = 20_000  # splits of the repeats enumerated exactly (C(16, 8) = 12,870)
SAMPLED_SPLITS = 20_000  # beyond that, a seeded sample of splits


@dataclass(frozen=True)
class Comparison:
    ratio: float  # median(a) / median(b)
    ci_low: Optional[float]
    ci_high: Optional[float]
    level: float
    p_value: Optional[float]
    alpha: float
    n: int  # repeats of a
    n_reference: int  # repeats of b
    min_detectable: Optional[float]  # relative gap detectable with POWER; None: none at this n
    outcome: str  # slower | faster | borderline | within noise | too few repeats | undecidable at this n
    verdict: str  # the plain-words sentence for the report

    def to_dict(self):
        return asdict(self)


def bootstrap_ratio_ci(a, b, level=LEVEL, seed=SEED, resamples=BOOTSTRAP_RESAMPLES):
    """Percentile interval for median(a) / median(b), resampling each side's repeats."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(a, float), np.asarray(b, float)
    med_a = np.median(a[rng.integers(0, len(a), (resamples, len(a)))], axis=1)
    med_b = np.median(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(med_a / med_b, [tail, 1 - tail])
    return float(low), float(high)


def smallest_p(n: int, m: int) -> float:
    """The smallest two-sided p an exact permutation test of n vs m repeats can give."""
    return min(1.0, 2 / math.comb(n + m, n))


def repeats_needed(alpha=ALPHA) -> int:
    """Repeats a side (equal sides) before the permutation test can reach ``alpha`` at all."""
    k = MIN_REPEATS
    while smallest_p(k, k) > alpha:
        k += 1
    return k


def permutation_p(a, b, seed=SEED) -> float:
    """Two-sided permutation test of mean(log a) - mean(log b): twice the smaller tail over every
    split of the pooled repeats into sides of the same sizes (a seeded sample of splits when
    there are too many to list)."""
    la, lb = np.log(np.asarray(a, float)), np.log(np.asarray(b, float))
    pooled, n = np.concatenate([la, lb]), len(la)
    sides = _splits(n, len(lb), seed)
    sums = sides @ pooled
    diffs = sums / n - (pooled.sum() - sums) / len(lb)
    observed = la.mean() - lb.mean()
    tolerance = 1e-9 * max(1.0, float(np.abs(pooled).max()))  # equal splits must count as equal
    greater, less = np.sum(diffs >= observed - tolerance), np.sum(diffs <= observed + tolerance)
    exact = len(sides) == math.comb(len(pooled), n)
    count = len(sides) if exact else len(sides) + 1  # a sample of splits counts the observed one too
    tail = min(greater, less) + (0 if exact else 1)
    return min(1.0, 2 * tail / count)


@functools.lru_cache(maxsize=32)
def _splits(n: int, m: int, seed: int) -> np.ndarray:
    """0/1 rows marking which of the n + m pooled repeats form side a: every split, or a sample."""
    total = math.comb(n + m, n)
    if total <= EXACT_UP_TO:
        chosen = np.array(list(itertools.combinations(range(n + m), n)))
    else:
        rng = np.random.default_rng(seed)
        chosen = np.argsort(rng.random((SAMPLED_SPLITS, n + m)), axis=1)[:, :n]
    sides = np.zeros((len(chosen), n + m))
    np.put_along_axis(sides, chosen, 1.0, axis=1)
    return sides


def min_detectable(a, b, alpha=ALPHA, power=POWER, level=LEVEL) -> Optional[float]:
    """Relative gap that this verdict rule calls with ``power`` at this n and pooled spread of the
    log speeds; None when no gap can be called at this n, or the repeats have no spread."""
    n, m = len(a), len(b)
    if n < MIN_REPEATS or m < MIN_REPEATS or smallest_p(n, m) > alpha:
        return None
    la, lb = np.log(np.asarray(a, float)), np.log(np.asarray(b, float))
    pooled_sd = math.sqrt(((n - 1) * la.var(ddof=1) + (m - 1) * lb.var(ddof=1)) / (n + m - 2))
    if pooled_sd == 0:
        return None
    return float(math.expm1(pooled_sd * _detectable_in_sd(n, m, alpha, power, level)))


@functools.lru_cache(maxsize=64)
def _detectable_in_sd(n, m, alpha, power, level, trials=200, steps=9) -> float:
    """The smallest gap, in standard deviations of the log speeds, that ``_called`` finds in
    ``power`` of simulated normal repeats. The rule is scale-free in the log speeds, so one
    seeded simulation per (n, m) serves every spread; the same noise at every gap keeps the
    search monotone."""
    rng = np.random.default_rng(SEED)
    noise = [(rng.normal(size=n), rng.normal(size=m)) for _ in range(trials)]

    def detected(gap):
        return np.mean([_called(np.exp(x - gap), np.exp(y), alpha, level, resamples=1000)
                        for x, y in noise])

    low, high = 0.0, 2.0
    while detected(high) < power and high < 64:  # 64 SDs: beyond any rule that can call a gap
        low, high = high, 2 * high
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (low, mid) if detected(mid) >= power else (mid, high)
    return high


def _called(a, b, alpha, level, resamples=BOOTSTRAP_RESAMPLES) -> bool:
    """The verdict rule: a difference is called when the test and the interval agree."""
    low, high = bootstrap_ratio_ci(a, b, level, resamples=resamples)
    return not low <= 1 <= high and permutation_p(a, b) < alpha


def _p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def compare(a: Sequence[float], b: Sequence[float], name="a", reference="b", level=LEVEL, alpha=ALPHA,
            seed=SEED) -> Comparison:
    """``a`` (e.g. k8s) against ``b`` (e.g. ssh), each a list of per-repeat samples/s."""
    a = [float(x) for x in a if x is not None and math.isfinite(x) and x > 0]  # a speed of nan/inf/0 is no measure
    b = [float(x) for x in b if x is not None and math.isfinite(x) and x > 0]
    if not a or not b:
        raise ValueError(f"{name} vs {reference}: each side needs at least one measured repeat")
    n, m = len(a), len(b)
    ratio = float(np.median(a) / np.median(b))
    # below MIN_REPEATS a bootstrap interval covers far less than it claims (about 70% at 2 vs 2)
    few = n < MIN_REPEATS or m < MIN_REPEATS
    low, high = (None, None) if few else bootstrap_ratio_ci(a, b, level, seed)
    head = f"{name} at {ratio:.1%} of {reference}"
    if low is not None:
        head += f", {level:.0%} CI [{low:.1%}, {high:.1%}]"
    head += f", {n} vs {m} repeats"
    alpha_text = f"α = {alpha:g}"
    if few:
        return Comparison(ratio, low, high, level, None, alpha, n, m, None, "too few repeats",
                          f"{head}: too few repeats to tell (at least {MIN_REPEATS} a side)")
    p = permutation_p(a, b, seed)
    detectable = min_detectable(a, b, alpha, POWER, level)
    if p < alpha and not low <= 1 <= high:
        outcome = "slower" if ratio < 1 else "faster"
        verdict = f"{head}: {outcome}, not explained by noise ({_p_text(p)} < {alpha_text})"
    elif p < alpha:
        outcome = "borderline"
        verdict = (f"{head}: borderline ({_p_text(p)} < {alpha_text}, but the interval includes 100%): "
                   "not called a difference; more repeats would settle it")
    elif smallest_p(n, m) > alpha:
        outcome = "undecidable at this n"
        verdict = (f"{head}: cannot be told from noise at this n ({_p_text(p)}; {n} vs {m} repeats cannot "
                   f"give p below {smallest_p(n, m):.2f}, {alpha_text}): run at least "
                   f"{repeats_needed(alpha)} a side")
    else:
        outcome = "within noise"
        verdict = f"{head}: within noise ({_p_text(p)} ≥ {alpha_text})" + (
            f"; a gap of {detectable:.1%} or more would have been detected ({POWER:.0%} power)"
            if detectable is not None else "; the repeats show no spread to judge a gap by")
    return Comparison(ratio, low, high, level, p, alpha, n, m, detectable, outcome, verdict)
