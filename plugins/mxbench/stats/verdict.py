"""Is one launcher slower than another, or is it run-to-run noise? Pure statistics over repeats.

- the ratio of median speeds, with a percentile-bootstrap confidence interval over the repeats
  (fixed seed, so a rebuilt report is identical);
- a two-sided permutation test on the log speeds (the mean log ratio), exact while the
  arrangements of the repeats are few enough to enumerate;
- a difference is called only when the test and the interval agree (p < α and the interval
  excludes 100%), which keeps the false-alarm rate under α;
- a line not called different reads "within the band" only when an equivalence test shows it:
  two one-sided tests (TOST) at α against the target band, i.e. the (1 - 2α) interval of the
  ratio (90% at α = 0.05, from the same bootstrap, t or two-stage machinery as the line's own
  interval) lies inside [1 - g, 1 + g] for the ``target_gap`` g, the band the report's forest
  plot draws (±15% in the demo). Else it reads "can't tell": absence of evidence is not shown
  as equivalence (``outcomes``);
- the minimum detectable difference: the gap this rule would call with 80% power at this n and
  this spread (a seeded simulation of the rule itself), at the level the report's family rule
  calls the line whatever the other lines show (``family.detection_alpha``), so "can't tell"
  says how large a gap it would have found, and how many rounds would resolve it.

Why not "the min-max ranges do not overlap": for two identical launchers that happens by chance
with probability 2 / C(n+m, n), 33% at 2 vs 2 repeats.

When the two launchers ran in rounds (one run of each per round, back to back, counterbalanced
a b, b a, ...), ``compare_paired`` analyses the rounds as pairs instead: a slow drift of the
machine moves both runs of a round alike and drops out of the per-round ratio, and the order
cancels what is left of a linear drift. Its test is a paired t test while the per-round log
ratios pass a normality check (Shapiro–Wilk), else the exact sign-flip test (``paired_test``):
the t test resolves at 6 rounds what the unpaired rule did, the sign-flip test (a sign test at 6
rounds) holds α when a slow run makes the tails heavy. With a budget of rounds,
``rounds_planned`` lets the first rounds' spread choose how many to run (Stein's two-stage rule)
and ``compare_two_stage`` judges them with that spread, so choosing calls no more false
differences; each pair is judged on the rounds its own plan asked for.

Each function here judges one line; the report's lines together are a family, which
``metrics.controlled`` holds to α with ``family.holm``.
"""
import functools
import itertools
import math
from dataclasses import asdict, dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from mxbench.stats.floors import ALPHA, MIN_REPEATS, repeats_needed, rounds_needed, smallest_p, smallest_paired_p
from mxbench.stats.outcomes import BORDERLINE, CANT_TELL, FASTER, SLOWER, TOO_FEW, UNDECIDABLE, WITHIN_BAND

LEVEL = 0.95  # confidence level of the interval
POWER = 0.80  # for the minimum detectable difference
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
    outcome: str  # ``outcomes``: slower | faster | borderline | within the band | can't tell | too few repeats | ...
    verdict: str  # the plain-words sentence for the report
    analysis: str = "unpaired"  # "unpaired" (``compare``) or "paired, n rounds" (``compare_paired``)
    target_gap: Optional[float] = None  # the band's half-width g: [1 - g, 1 + g]; None: no band to judge by
    tost_low: Optional[float] = None  # the (1 - 2α) interval the equivalence test judges by
    tost_high: Optional[float] = None
    detect_alpha: Optional[float] = None  # the level ``min_detectable`` was computed at (the family's)
    rounds_to_resolve: Optional[int] = None  # rounds (repeats a side, unpaired) for an interval of ±g/2

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
    pooled_sd = _pooled_sd(a, b)
    if pooled_sd == 0:
        return None
    return float(math.expm1(pooled_sd * _detectable_in_sd(n, m, alpha, power, level)))


def _pooled_sd(a, b) -> float:
    """The pooled standard deviation of the two sides' log speeds."""
    la, lb = np.log(np.asarray(a, float)), np.log(np.asarray(b, float))
    n, m = len(la), len(lb)
    return math.sqrt(((n - 1) * la.var(ddof=1) + (m - 1) * lb.var(ddof=1)) / (n + m - 2))


@functools.lru_cache(maxsize=64)
def _detectable_in_sd(n, m, alpha, power, level, trials=200, steps=9) -> float:
    """The smallest gap, in standard deviations of the log speeds, that ``_called`` finds in
    ``power`` of simulated normal repeats. The rule is scale-free in the log speeds, so one
    seeded simulation per (n, m) serves every spread; the same noise at every gap keeps the
    search monotone."""
    noise = np.random.default_rng(SEED).normal(size=(trials, n + m))  # each trial's n, then its m
    called_at = _called_rows(noise[:, :n], noise[:, n:], alpha, level, resamples=1000)

    def detected(gap):
        return called_at(gap).mean()

    low, high = 0.0, 2.0
    while detected(high) < power and high < 64:  # 64 SDs: beyond any rule that can call a gap
        low, high = high, 2 * high
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (low, mid) if detected(mid) >= power else (mid, high)
    return high


def _called_rows(x: np.ndarray, y: np.ndarray, alpha, level, resamples=BOOTSTRAP_RESAMPLES):
    """``_called`` over rows of log speeds at once, as a function of the gap: gap -> whether the
    rule calls each row's exp(x - gap) against exp(y). What the rule computes at gap 0 serves
    every gap: the ratio interval scales by exp(-gap), each split's difference of means moves
    linearly with it. Same seeded resamples and splits as ``_called``, so the same calls, and
    per gap only a comparison over the splits (issue 43: the per-trial loop took seconds per (n, m))."""
    n, m = x.shape[1], y.shape[1]
    rng = np.random.default_rng(SEED)  # the draws of ``bootstrap_ratio_ci``, in its order
    take_a, take_b = rng.integers(0, n, (resamples, n)), rng.integers(0, m, (resamples, m))
    ratios = np.median(np.exp(x)[:, take_a], axis=2) / np.median(np.exp(y)[:, take_b], axis=2)
    tail = (1 - level) / 2
    log_low, log_high = np.log(np.quantile(ratios, [tail, 1 - tail], axis=1))

    sides = _splits(n, m, SEED)  # the splits of ``permutation_p``
    pooled = np.hstack([x, y])
    sums = sides @ pooled.T  # splits x rows
    margin_at_0 = sums / n - (pooled.sum(axis=1) - sums) / m - (x.mean(axis=1) - y.mean(axis=1))
    from_a = sides[:, :n].sum(axis=1)
    slope = (from_a / n - (n - from_a) / m - 1)[:, None]  # d(split's diff - observed) / d(-gap)
    exact = len(sides) == math.comb(n + m, n)
    count = len(sides) if exact else len(sides) + 1

    def called(gap: float) -> np.ndarray:
        margin = margin_at_0 - gap * slope
        biggest = np.maximum(np.abs(x - gap).max(axis=1), np.abs(y).max(axis=1))
        tolerance = 1e-9 * np.maximum(1.0, biggest)
        greater, less = np.sum(margin >= -tolerance, axis=0), np.sum(margin <= tolerance, axis=0)
        p = np.minimum(1.0, 2 * (np.minimum(greater, less) + (0 if exact else 1)) / count)
        outside = (gap > log_high) | (gap < log_low)
        return outside & (p < alpha)

    return called


def _called(a, b, alpha, level, resamples=BOOTSTRAP_RESAMPLES) -> bool:
    """The verdict rule: a difference is called when the test and the interval agree."""
    low, high = bootstrap_ratio_ci(a, b, level, resamples=resamples)
    return not low <= 1 <= high and permutation_p(a, b) < alpha


def _judged(head: str, ratio: float, low: float, high: float, p: float, alpha: float,
            detectable: Optional[float], what: str, undecidable: Optional[str] = None,
            equivalence: Optional["Equivalence"] = None) -> Tuple[str, str]:
    """(outcome, verdict) by the one rule of every analysis: a difference is called only when
    p < α and the interval excludes 100%; equivalence ("within the band") only when the
    equivalence test shows it. ``what``: "repeats" or "rounds"; ``undecidable``: why no p at this
    n could reach α, when so."""
    alpha_text = f"α = {alpha:g}"
    if p < alpha and not low <= 1 <= high:
        outcome = SLOWER if ratio < 1 else FASTER
        return outcome, f"{head}: {outcome}, not explained by noise ({_p_text(p)} < {alpha_text})"
    if p < alpha:
        return BORDERLINE, (f"{head}: {BORDERLINE} ({_p_text(p)} < {alpha_text}, but the interval includes 100%): "
                            f"not called a difference; more {what} would settle it")
    if undecidable:
        return UNDECIDABLE, f"{head}: cannot be told from noise at this n ({_p_text(p)}; {undecidable}"
    eq = equivalence or Equivalence(None, None, None, alpha)
    if eq.shown:
        return WITHIN_BAND, f"{head}: {WITHIN_BAND} ({_p_text(p)} ≥ {alpha_text}; {eq.text()})"
    detect = eq.detect_alpha if eq.detect_alpha is not None else alpha
    at = f"{POWER:.0%} power" + (f", at the family's α = {detect:.3g}" if detect < alpha else "")
    said = f"{head}: {CANT_TELL} ({_p_text(p)} ≥ {alpha_text}; {eq.text()})" + (
        f"; a gap of {detectable:.1%} or more would have been detected ({at})" if detectable is not None
        else f"; {eq.unreachable}" if eq.unreachable else f"; the {what} show no spread to judge a gap by")
    if eq.rounds is not None and eq.target_gap:
        said += f"; about {eq.rounds} {what} would narrow the interval to ±{eq.target_gap / 2:.1%}"
    return CANT_TELL, said


@dataclass(frozen=True)
class Equivalence:
    """The equivalence test of one line (TOST at α): the (1 - 2α) interval against the band
    [1 - g, 1 + g]; and how many rounds would resolve a line that shows neither."""
    low: Optional[float]
    high: Optional[float]
    target_gap: Optional[float]
    alpha: float
    detect_alpha: Optional[float] = None
    rounds: Optional[int] = None
    unreachable: Optional[str] = None  # why no gap could be called at ``detect_alpha`` at this n

    @property
    def shown(self) -> bool:
        return (self.target_gap is not None and self.target_gap > 0 and self.low is not None
                and self.high is not None and 1 - self.target_gap <= self.low and self.high <= 1 + self.target_gap)

    def text(self) -> str:
        if not self.target_gap or self.low is None or self.high is None:
            return "no target band to show equivalence by"
        g, level = self.target_gap, 1 - 2 * self.alpha
        where = "lies inside" if self.shown else "runs past"
        shown = ".0%" if abs(g * 100 - round(g * 100)) < 1e-9 else ".1%"  # ±15%, but ±0.5%
        return (f"the {level:.0%} interval [{self.low:.1%}, {self.high:.1%}] {where} the ±{g:{shown}} target band "
                f"[{1 - g:{shown}}, {1 + g:{shown}}], equivalence test (TOST) at α = {self.alpha:g}")

    def fields(self) -> dict:
        return {"target_gap": self.target_gap, "tost_low": self.low, "tost_high": self.high,
                "detect_alpha": self.detect_alpha, "rounds_to_resolve": self.rounds}


def rounds_for(spread: float, first_n: int, target_gap: float, level=LEVEL) -> int:
    """Rounds (or repeats a side, for an unpaired spread of a difference) whose interval is
    ±``target_gap``/2 at this spread of the log ratios, judged with ``first_n - 1`` degrees of
    freedom: the stop rule's plan (``rounds_planned``), at least ``first_n``."""
    if not spread or first_n < 2 or not math.isfinite(spread):
        return first_n
    half = math.log1p(target_gap / 2)
    return max(first_n, math.ceil((t_quantile(1 - (1 - level) / 2, first_n - 1) * spread / half) ** 2))


def _p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def compare(a: Sequence[float], b: Sequence[float], name="a", reference="b", level=LEVEL, alpha=ALPHA,
            seed=SEED, target_gap: Optional[float] = None, detect_alpha: Optional[float] = None) -> Comparison:
    """``a`` (e.g. k8s) against ``b`` (e.g. ssh), each a list of per-repeat samples/s.
    ``target_gap``: the band of the equivalence test (none: a line not called reads "can't
    tell"); ``detect_alpha``: the level the detectable gap is computed at (the family's,
    ``family.detection_alpha``; default ``alpha``)."""
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
        return Comparison(ratio, low, high, level, None, alpha, n, m, None, TOO_FEW,
                          f"{head}: too few repeats to tell (at least {MIN_REPEATS} a side)",
                          f"unpaired, {n} vs {m} repeats", target_gap)
    assert low is not None and high is not None  # from MIN_REPEATS a side on, there is an interval
    p = permutation_p(a, b, seed)
    detect = alpha if detect_alpha is None else detect_alpha
    detectable = min_detectable(a, b, detect, POWER, level)
    undecidable = (f"{n} vs {m} repeats cannot give p below {smallest_p(n, m):.2f}, {alpha_text}): run at least "
                   f"{repeats_needed(alpha)} a side") if smallest_p(n, m) > alpha else None
    tost_low, tost_high = bootstrap_ratio_ci(a, b, 1 - 2 * alpha, seed)
    unreachable = (f"{n} vs {m} repeats cannot give p below {smallest_p(n, m):.3f}, so no gap can be called at the "
                   f"family's α = {detect:.3g}") if smallest_p(n, m) > detect else None
    equivalence = Equivalence(tost_low, tost_high, target_gap, alpha, detect,
                              rounds_for(math.sqrt(2) * _pooled_sd(a, b), min(n, m), target_gap, level)
                              if target_gap else None, unreachable)
    outcome, verdict = _judged(head, ratio, low, high, p, alpha, detectable, "repeats", undecidable, equivalence)
    return Comparison(ratio, low, high, level, p, alpha, n, m, detectable, outcome, verdict,
                      f"unpaired, {n} vs {m} repeats", **equivalence.fields())


# Paired analysis: runs that came in rounds, one of each launcher per round, back to back.

NORMALITY_ALPHA = 0.05  # a Shapiro–Wilk p below this: the log ratios are not taken as normal
EXACT_SIGN_FLIPS_UP_TO = 12  # rounds whose 2^n sign patterns are enumerated (4,096); beyond, a seeded sample
SAMPLED_SIGN_FLIPS = 10_000


@functools.lru_cache(maxsize=256)
def t_quantile(probability: float, df: int) -> float:
    """The Student-t quantile (SciPy's; cached, as the power searches ask for the same few)."""
    from scipy import stats  # lazily: scipy.stats takes a second to import, and most importers never need it

    return float(stats.t.ppf(probability, df))


def t_upper_tail(t: float, df: int) -> float:
    """P(T > t), the upper tail of the Student t distribution."""
    from scipy import stats

    return float(stats.t.sf(t, df))


def _t_half_width(log_ratios: np.ndarray, level: float) -> float:
    """Half-width of the t interval on the mean per-round log ratio."""
    n = len(log_ratios)
    return t_quantile(1 - (1 - level) / 2, n - 1) * float(np.std(log_ratios, ddof=1)) / math.sqrt(n)


def paired_interval(log_ratios, level=LEVEL):
    """Interval for the ratio exp(mean per-round log ratio): the t interval on the mean log ratio.

    Why t and not a bootstrap: at 4 to 8 rounds a percentile bootstrap of the mean covers only
    about 80-90% when it claims 95% (it cannot see the spread beyond the few rounds it resamples),
    while the t interval holds 95% on normal log ratios at any n (tests/orchestration/stats/
    test_verdict.py simulates both, seeded). Log speeds of repeated runs are close to normal.
    """
    d = np.asarray(log_ratios, float)
    half = _t_half_width(d, level)
    return float(math.exp(d.mean() - half)), float(math.exp(d.mean() + half))


def sign_flip_p(log_ratios, seed=SEED) -> float:
    """Two-sided exact sign-flip (paired permutation) test of mean log ratio = 0: under "the
    launchers are alike" each round's ratio is as likely inverted, so every pattern of signs is
    equally likely. Exact over all 2^n patterns up to EXACT_SIGN_FLIPS_UP_TO rounds, else a
    seeded sample."""
    return float(_sign_flip_p_rows(np.asarray(log_ratios, float)[None, :], seed)[0])


def _sign_flip_p_rows(rows: np.ndarray, seed=SEED, chunk=64) -> np.ndarray:
    """``sign_flip_p`` of each row (rounds along the row), a chunk of rows at a time."""
    n = rows.shape[1]
    signs = _sign_patterns(n, seed)
    exact = n <= EXACT_SIGN_FLIPS_UP_TO
    p = np.empty(len(rows))
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        sums = np.abs(signs @ part.T)  # patterns x rows
        observed = np.abs(part.sum(axis=1))
        tolerance = 1e-9 * np.maximum(1.0, np.abs(part).max(axis=1))  # equal sums must count as equal
        extreme = np.sum(sums >= observed - tolerance, axis=0)
        # a sample of patterns counts the observed one too
        p[start:start + chunk] = extreme / len(signs) if exact else (extreme + 1) / (len(signs) + 1)
    return np.minimum(1.0, p)


@functools.lru_cache(maxsize=32)
def _sign_patterns(n: int, seed: int) -> np.ndarray:
    """Rows of +1/-1, one per sign pattern of n rounds: every pattern, or a seeded sample."""
    if n <= EXACT_SIGN_FLIPS_UP_TO:
        bits = (np.arange(2 ** n)[:, None] >> np.arange(n)) & 1
    else:
        bits = np.random.default_rng(seed).integers(0, 2, (SAMPLED_SIGN_FLIPS, n))
    return 1.0 - 2.0 * bits


def called_paired(rows, alpha=ALPHA, level=LEVEL) -> np.ndarray:
    """The paired verdict rule for each row of per-round log ratios (``paired_test``): a
    difference is called when the test and the interval agree (p < alpha, and the t interval
    excludes a ratio of 1)."""
    rows = np.atleast_2d(np.asarray(rows, float))
    n = rows.shape[1]
    half = t_quantile(1 - (1 - level) / 2, n - 1) * rows.std(axis=1, ddof=1) / math.sqrt(n)
    return (np.abs(rows.mean(axis=1)) > half) & (_paired_p_rows(rows) < alpha)


def _paired_p_rows(rows: np.ndarray) -> np.ndarray:
    """``paired_test``'s p of each row: the t test's where the row passes the normality check,
    else the sign-flip test's."""
    normal = _normal_rows(rows)
    p = np.zeros(len(rows))
    if not normal.all():  # the sign-flip test only where it is the answer: it costs 2^n sums a row
        p[~normal] = _sign_flip_p_rows(rows[~normal])
    spread = rows.std(axis=1, ddof=1)
    t = np.abs(rows.mean(axis=1)) * math.sqrt(rows.shape[1]) / np.where(normal, spread, 1.0)
    from scipy import stats

    return np.where(normal, 2 * stats.t.sf(t, rows.shape[1] - 1), p)


def _normal_rows(rows: np.ndarray) -> np.ndarray:
    """Whether each row of log ratios passes the normality check (Shapiro–Wilk p ≥
    NORMALITY_ALPHA, some spread, at least MIN_REPEATS rounds)."""
    spread = rows.std(axis=1, ddof=1) if rows.shape[1] > 1 else np.zeros(len(rows))
    if rows.shape[1] < MIN_REPEATS:
        return np.zeros(len(rows), bool)
    from scipy import stats

    varied = spread > 1e-12 * np.maximum(1.0, np.abs(rows).max(axis=1))
    p = np.ones(len(rows))
    if varied.any():
        p[varied] = stats.shapiro(rows[varied], axis=1).pvalue
    return varied & (p >= NORMALITY_ALPHA)


def normality_p(log_ratios) -> Optional[float]:
    """The Shapiro–Wilk p of the per-round log ratios: how likely so un-normal a sample is if they
    are normal; None below MIN_REPEATS rounds or with no spread (then there is nothing to check)."""
    d = np.asarray(log_ratios, float)
    if len(d) < MIN_REPEATS or not _has_spread(d):
        return None
    from scipy import stats

    return float(stats.shapiro(d).pvalue)


def _has_spread(d: np.ndarray) -> bool:
    return len(d) > 1 and float(np.std(d, ddof=1)) > 1e-12 * max(1.0, float(np.abs(d).max()))


def paired_test(log_ratios, seed=SEED) -> Tuple[float, str]:
    """(two-sided p, which test gave it) for mean log ratio = 0: the paired t test when the log
    ratios pass a normality check (Shapiro–Wilk p ≥ NORMALITY_ALPHA), else the exact sign-flip
    test, which assumes only that the ratios are symmetric under no difference.

    Why t first: over 6 rounds the sign-flip test reaches p < 0.05 only when all six ratios
    agree, a sign test, which has less power than the unpaired rule it replaced (31% vs 46% of a
    4% gap at CV 3%, simulated); the t test, which uses how far the ratios lie from 1 and not only
    their signs, finds 47% (tests/orchestration/stats/test_verdict_default.py). Why the check:
    a slow run (an outlier) makes the t test's normal tails wrong, and the sign-flip test holds α
    whatever the tails.
    """
    d = np.asarray(log_ratios, float)
    check = normality_p(d)
    if check is None or check < NORMALITY_ALPHA:
        why = ("the rounds show no spread for a t test" if check is None else
               f"the log ratios fail the normality check, Shapiro–Wilk p = {check:.3f} < {NORMALITY_ALPHA:g}")
        return sign_flip_p(d, seed), f"sign-flip test ({why})"
    t = abs(float(d.mean())) * math.sqrt(len(d)) / float(np.std(d, ddof=1))
    return 2 * t_upper_tail(t, len(d) - 1), "t test (normality check passed)"


def paired_min_detectable(log_ratios, alpha=ALPHA, power=POWER, level=LEVEL) -> Optional[float]:
    """Relative gap the paired rule calls with ``power`` at this many rounds and this spread of
    the per-round log ratios; None when no gap can be called at this n, or there is no spread."""
    d = np.asarray(log_ratios, float)
    n = len(d)
    if n < MIN_REPEATS:
        return None
    sd = float(np.std(d, ddof=1))
    if sd == 0:
        return None
    return float(math.expm1(sd * _paired_detectable_in_sd(n, alpha, power, level)))


@functools.lru_cache(maxsize=64)
def _paired_detectable_in_sd(n, alpha, power, level, trials=400, steps=10) -> float:
    """The smallest mean log ratio, in standard deviations of the per-round log ratios, that
    ``called_paired`` finds in ``power`` of simulated normal rounds (scale-free, so one seeded
    simulation per n serves every spread; the same noise at every gap keeps the search monotone)."""
    noise = np.random.default_rng(SEED).normal(size=(trials, n))

    def detected(gap):
        return called_paired(noise - gap, alpha, level).mean()

    low, high = 0.0, 2.0
    while detected(high) < power and high < 64:
        low, high = high, 2 * high
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (low, mid) if detected(mid) >= power else (mid, high)
    return high


def _valid_rounds(pairs) -> np.ndarray:
    """Per-round log ratios log(a / b), rounds whose either speed is no measure (nan/inf/0) dropped."""
    kept = [(float(a), float(b)) for a, b in pairs
            if all(x is not None and math.isfinite(x) and x > 0 for x in (a, b))]
    return np.array([math.log(a / b) for a, b in kept], float)


def compare_paired(pairs: Sequence[Tuple[float, float]], name="a", reference="b", level=LEVEL, alpha=ALPHA,
                   seed=SEED, target_gap: Optional[float] = None, detect_alpha: Optional[float] = None) -> Comparison:
    """``a`` (e.g. k8s) against ``b`` (e.g. ssh) from rounds: ``pairs`` holds each round's
    (a, b) samples/s. The ratio is the geometric mean of the per-round ratios; its interval the t
    interval on the mean log ratio; the test ``paired_test``'s (t, or sign-flip when the log
    ratios fail the normality check). The outcome words are ``compare``'s; a sign-flip test
    below ``floors.rounds_needed`` rounds cannot reach ``alpha``. ``target_gap`` and
    ``detect_alpha``: as ``compare``'s; the equivalence interval is the t interval at 1 - 2α."""
    d = _valid_rounds(pairs)
    n = len(d)
    if not n:
        raise ValueError(f"{name} vs {reference}: no round with both speeds measured")
    ratio = float(math.exp(d.mean()))
    if n < MIN_REPEATS:  # 2 rounds give a t interval with 1 degree of freedom: too wide to say anything
        return Comparison(ratio, None, None, level, None, alpha, n, n, None, TOO_FEW,
                          f"{name} at {ratio:.1%} of {reference}, {n} rounds paired: too few repeats to tell "
                          f"(at least {MIN_REPEATS} rounds)", f"paired, {n} rounds", target_gap)
    low, high = paired_interval(d, level)
    head = f"{name} at {ratio:.1%} of {reference}, {level:.0%} CI [{low:.1%}, {high:.1%}], {n} rounds paired"
    p, test = paired_test(d, seed)
    detect = alpha if detect_alpha is None else detect_alpha
    detectable = paired_min_detectable(d, detect, POWER, level)
    undecidable = (f"a sign-flip test over {n} rounds cannot give p below {smallest_paired_p(n):.3f}, "
                   f"α = {alpha:g}): run at least {rounds_needed(alpha)} rounds") \
        if test.startswith("sign-flip") and smallest_paired_p(n) > alpha else None
    tost_low, tost_high = paired_interval(d, 1 - 2 * alpha)
    equivalence = Equivalence(tost_low, tost_high, target_gap, alpha, detect,
                              rounds_for(float(np.std(d, ddof=1)), n, target_gap, level) if target_gap else None)
    outcome, verdict = _judged(head, ratio, low, high, p, alpha, detectable, "rounds", undecidable, equivalence)
    return Comparison(ratio, low, high, level, p, alpha, n, n, detectable, outcome, verdict,
                      f"paired, {n} rounds, {test}", **equivalence.fields())


def rounds_planned(first_stage: Sequence[Tuple[float, float]], target_gap: float, most: int,
                   level=LEVEL) -> Tuple[int, str]:
    """Stein's two-stage rule: how many rounds in all (at least the first stage's, at most
    ``most``) give an interval of ±``target_gap``/2 or narrower, judged from the first stage's
    spread alone.

    Why not stop as soon as the interval is narrow: that picks the rounds whose spread happened
    to be low, so the interval at the stop is too narrow and identical launchers are called
    different more often than α (5.9% at CV 3.5% and 12 rounds, simulated). Deciding from the
    first stage only, and judging with its spread (``compare_two_stage``), keeps the t test exact:
    the later rounds' mean is independent of the first stage's spread.
    """
    d = _valid_rounds(first_stage)
    n1 = len(d)
    spread = float(np.std(d, ddof=1)) if n1 > 1 else float("inf")
    needed = n1 if spread == 0 else rounds_for(spread, n1, target_gap, level) if n1 > 1 else most + 1
    total = min(most, max(n1, needed))
    reached = math.expm1(_stein_half_width(spread, n1, total, level))
    within = f"±{reached:.1%} {{}} ±{target_gap / 2:.1%} (target gap {target_gap:.0%})"
    if needed <= most:
        return total, f"stopped after {total} rounds: the first {n1} rounds' spread gives " + within.format("≤")
    return total, f"budget spent: {total} rounds give " + within.format(">")


def _stein_half_width(first_spread: float, first_n: int, n: int, level: float) -> float:
    return t_quantile(1 - (1 - level) / 2, first_n - 1) * first_spread / math.sqrt(n)


def compare_two_stage(pairs: Sequence[Tuple[float, float]], first_n: int, name="a", reference="b",
                      level=LEVEL, alpha=ALPHA, seed=SEED, target_gap: Optional[float] = None,
                      detect_alpha: Optional[float] = None) -> Comparison:
    """``compare_paired`` for rounds whose number ``rounds_planned`` chose from the first
    ``first_n``: the mean log ratio over every round, judged with the first stage's spread and
    its ``first_n - 1`` degrees of freedom (Stein 1945), so that choosing the number of rounds
    from the data calls no more false differences than α. A t test, as long as the log ratios
    pass the normality check it assumes; else the exact sign-flip test over every round.
    ``pairs``: the rounds this pair's own plan asked for, no more (``metrics.launcher_ratios``):
    a round run for another pair would enter the mean but not the spread. ``target_gap`` and
    ``detect_alpha``: as ``compare``'s; the equivalence interval is Stein's at 1 - 2α."""
    d = _valid_rounds(pairs)
    n = len(d)
    if first_n < MIN_REPEATS or n < first_n:
        raise ValueError(f"{name} vs {reference}: {n} rounds, fewer than the first stage's {first_n}")
    spread, df = float(np.std(d[:first_n], ddof=1)), first_n - 1
    ratio, mean = float(math.exp(d.mean())), float(d.mean())
    if spread == 0:
        low = high = ratio
    else:
        half = _stein_half_width(spread, first_n, n, level)
        low, high = math.exp(mean - half), math.exp(mean + half)
    p, test = _stein_test(d, first_n, seed)
    detect = alpha if detect_alpha is None else detect_alpha
    detectable = math.expm1(_stein_detectable_in_sd(df, detect, POWER) * spread / math.sqrt(n)) if spread else None
    head = f"{name} at {ratio:.1%} of {reference}, {level:.0%} CI [{low:.1%}, {high:.1%}], {n} rounds paired"
    tost_half = _stein_half_width(spread, first_n, n, 1 - 2 * alpha)
    equivalence = Equivalence(math.exp(mean - tost_half), math.exp(mean + tost_half), target_gap, alpha, detect,
                              rounds_for(spread, first_n, target_gap, level) if target_gap else None)
    outcome, verdict = _judged(head, ratio, low, high, p, alpha, detectable, "rounds", None, equivalence)
    return Comparison(ratio, low, high, level, p, alpha, n, n, detectable, outcome, verdict,
                      f"paired, {n} rounds, two-stage (spread of the first {first_n}), {test}",
                      **equivalence.fields())


@functools.lru_cache(maxsize=64)
def _stein_detectable_in_sd(df: int, alpha: float, power: float) -> float:
    """The mean log ratio, in first-stage standard deviations over sqrt(rounds), that Stein's t test
    (``df`` degrees of freedom, two-sided at ``alpha``) calls with ``power``: the noncentrality at
    which the noncentral t passes the critical value that often. Exact, where the sum of the t
    quantiles understates it at few degrees of freedom (4.45 against 4.60 at 5, α/3)."""
    from scipy import optimize, stats

    critical = t_quantile(1 - alpha / 2, df)
    approximate = critical + t_quantile(power, df)
    try:
        return float(optimize.brentq(lambda ncp: stats.nct.sf(critical, df, ncp) - power, 0.0, 4 * approximate))
    except ValueError:  # no sign change within the bracket (numerically): the textbook approximation
        return approximate


def _stein_test(d: np.ndarray, first_n: int, seed=SEED) -> Tuple[float, str]:
    """(p, test) of the two-stage verdict: Stein's t on the first ``first_n`` rounds' spread when
    every round's log ratio passes the normality check, else the sign-flip test over them all."""
    check = normality_p(d)
    spread, mean = float(np.std(d[:first_n], ddof=1)), float(d.mean())
    if check is not None and check >= NORMALITY_ALPHA and spread > 0:
        p = 2 * t_upper_tail(abs(mean) * math.sqrt(len(d)) / spread, first_n - 1)
        return p, "t test (normality check passed)"
    why = ("the rounds show no spread for a t test" if check is None else
           f"the log ratios fail the normality check, Shapiro–Wilk p = {check:.3f} < {NORMALITY_ALPHA:g}")
    return sign_flip_p(d, seed), f"sign-flip test ({why})"
