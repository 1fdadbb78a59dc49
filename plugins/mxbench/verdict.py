"""Is one launcher slower than another, or is it run-to-run noise? Pure statistics over repeats.

- the ratio of median speeds, with a percentile-bootstrap confidence interval over the repeats
  (fixed seed, so a rebuilt report is identical);
- a two-sided permutation test on the log speeds (the mean log ratio), exact while the
  arrangements of the repeats are few enough to enumerate;
- a difference is called only when the test and the interval agree (p < α and the interval
  excludes 100%), which keeps the false-alarm rate under α;
- the minimum detectable difference: the gap this test would find with 80% power at this n and
  this spread, so "within noise" says how large a gap it rules out.

Why not "the min-max ranges do not overlap": for two identical launchers that happens by chance
with probability 2 / C(n+m, n), 33% at 2 vs 2 repeats.
"""
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
EXACT_UP_TO = 200_000  # arrangements enumerated exactly; more are sampled (seeded)


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
    """Two-sided permutation test of mean(log a) - mean(log b)."""
    from scipy import stats

    la, lb = np.log(np.asarray(a, float)), np.log(np.asarray(b, float))
    arrangements = math.comb(len(la) + len(lb), len(la))
    result = stats.permutation_test(
        (la, lb), lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis), vectorized=True,
        permutation_type="independent", alternative="two-sided",
        n_resamples=np.inf if arrangements <= EXACT_UP_TO else 20_000, rng=seed)
    return float(result.pvalue)


def min_detectable(a, b, alpha=ALPHA, power=POWER) -> Optional[float]:
    """Relative gap detectable with ``power`` at this n and pooled spread (t approximation on
    the log speeds); None when this n cannot reach ``alpha`` whatever the gap."""
    from scipy import stats

    n, m = len(a), len(b)
    if n < 2 or m < 2 or smallest_p(n, m) > alpha:
        return None
    la, lb = np.log(np.asarray(a, float)), np.log(np.asarray(b, float))
    df = n + m - 2
    pooled_sd = math.sqrt(((n - 1) * la.var(ddof=1) + (m - 1) * lb.var(ddof=1)) / df)
    gap = (stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * pooled_sd * math.sqrt(1 / n + 1 / m)
    return float(math.expm1(gap))


def _p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def compare(a: Sequence[float], b: Sequence[float], name="a", reference="b", level=LEVEL, alpha=ALPHA,
            seed=SEED) -> Comparison:
    """``a`` (e.g. k8s) against ``b`` (e.g. ssh), each a list of per-repeat samples/s."""
    a = [float(x) for x in a if x is not None and not math.isnan(x)]
    b = [float(x) for x in b if x is not None and not math.isnan(x)]
    if not a or not b:
        raise ValueError(f"{name} vs {reference}: each side needs at least one measured repeat")
    n, m = len(a), len(b)
    ratio = float(np.median(a) / np.median(b))
    low, high = bootstrap_ratio_ci(a, b, level, seed) if n >= 2 and m >= 2 else (None, None)
    head = f"{name} at {ratio:.1%} of {reference}"
    if low is not None:
        head += f", {level:.0%} CI [{low:.1%}, {high:.1%}]"
    head += f", {n} vs {m} repeats"
    alpha_text = f"α = {alpha:g}"
    if n < MIN_REPEATS or m < MIN_REPEATS:
        return Comparison(ratio, low, high, level, None, alpha, n, m, None, "too few repeats",
                          f"{head}: too few repeats to tell (at least {MIN_REPEATS} a side)")
    p = permutation_p(a, b, seed)
    detectable = min_detectable(a, b, alpha)
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
        verdict = (f"{head}: within noise ({_p_text(p)} ≥ {alpha_text}); a gap of {detectable:.1%} or more "
                   f"would have been detected ({POWER:.0%} power)")
    return Comparison(ratio, low, high, level, p, alpha, n, m, detectable, outcome, verdict)
