"""Where a series' level changed: change points over a variant's whole history.

A series is one variant on one launcher and one kind of machine (the store's hardware
fingerprint); its points are its DAG runs' median samples/s in the order they were measured,
which for a backfill over builds is build order. The regression rule compares one DAG run with
the few before it; this looks at the whole history at once, as MongoDB's and Apache Otava's
E-Divisive detectors do, so that a gradual drift (five builds 1% slower each) shows as the level
change it adds up to, and a step is placed at the first DAG run of its new level.

Two stages, both on log speeds (a change is a ratio):
1. ``ruptures``' PELT with the l2 cost proposes breakpoints over the DAG runs' median speeds,
   with the penalty ``PENALTY`` · σ̂² · ln n, σ̂ a level's noise (``level_noise``), floored at
   ``NOISE_FLOOR`` so that a perfectly flat history still needs a real step;
2. a breakpoint stays only if the two levels beside it differ by ``MIN_SHIFT`` or more and a
   Welch t-test over their repeats gives p < ``ALPHA``; the weakest breakpoint goes first and its
   neighbours are judged again over the merged level, so a ramp cut into short pieces becomes one
   change point where it is significant. The repeats, not the DAG runs' medians: a backfill of a
   few builds has few DAG runs, and stage 1, on the medians, already keeps noise out.

Measured on seeded series (``tests/orchestration/stats/test_change_points.py``; per-point noise 1%, 20
points): noise alone gives a change point in about 3.5% of series, a 5% step is found at the
right DAG run in about 97%, and a 5 × 1% ramp is found inside the ramp in all. Where DAG runs
also differ from day to day (1.5% on top of 2% per run, 4 repeats), noise alone marks about 5% of
20-run series, and 10–20% of series of 5–7 DAG runs, whose noise is judged from the repeats
alone: marks to look at, not alerts (the regression rule alerts). Pure: no Airflow.
"""
import math
from typing import List, Sequence

import pandas as pd

PENALTY = 4.0  # times σ̂² ln n: a BIC-like cost per breakpoint, stricter than BIC's 2
MIN_SHIFT = 0.01  # a level change smaller than this is not shown, however certain
NOISE_FLOOR = 0.002  # the least point-to-point noise assumed (log units, ≈ 0.2%)
ALPHA = 0.01  # the t-test a breakpoint must pass
MIN_SEGMENT = 2  # DAG runs in a level: one alone is an outlier, not a level
SHORT_SERIES = 8  # fewer DAG runs: their noise is judged from the repeats (``level_noise``)
COLUMNS = ["index", "shift", "p_value"]


def change_points(runs: Sequence, penalty: float = PENALTY, min_shift: float = MIN_SHIFT, alpha: float = ALPHA,
                  noise_floor: float = NOISE_FLOOR) -> pd.DataFrame:
    """The change points of one series (``runs``: each DAG run's positive speeds, its repeats, or a
    single speed, in measured order): one row each, ``index`` (the first DAG run of the new level),
    ``shift`` (the new level over the old, geometric means of the runs' medians, minus 1) and
    ``p_value`` (over the two levels' repeats); none where the series is shorter than two levels."""
    import numpy as np
    import ruptures
    from scipy import stats

    logs = [np.log(np.atleast_1d(np.asarray(run, dtype=float))) for run in runs]
    levels = np.array([np.median(run) for run in logs])
    n = len(levels)
    if n < 2 * MIN_SEGMENT:
        return pd.DataFrame(columns=COLUMNS)
    sigma = max(level_noise(levels, logs), noise_floor)
    found = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(levels.reshape(-1, 1))
    breaks = found.predict(pen=penalty * sigma ** 2 * math.log(n))[:-1]  # the last is n itself

    def judged(breaks: List[int]) -> List[tuple]:
        edges = [0, *breaks, n]
        rows = []
        for i, at in enumerate(breaks):
            shift = math.expm1(float(levels[at:edges[i + 2]].mean() - levels[edges[i]:at].mean()))
            # over the repeats: a short history's levels are few points, each the median of several
            p = float(stats.ttest_ind(np.concatenate(logs[edges[i]:at]), np.concatenate(logs[at:edges[i + 2]]),
                                      equal_var=False).pvalue)
            rows.append((at, shift, 1.0 if math.isnan(p) else p))
        return rows

    rows = judged(breaks)
    while rows:
        # the weakest: too small a shift before any p
        weakest = max(range(len(rows)), key=lambda i: (abs(rows[i][1]) < min_shift, rows[i][2]))
        if abs(rows[weakest][1]) >= min_shift and rows[weakest][2] < alpha:
            break
        breaks = breaks[:weakest] + breaks[weakest + 1:]
        rows = judged(breaks)
    return pd.DataFrame(rows, columns=COLUMNS)


def level_noise(levels, logs) -> float:
    """The spread of one DAG run's level (log units): from the differences of consecutive levels
    (1.4826 · MAD / √2: robust to the steps themselves) where there are ``SHORT_SERIES`` levels or
    more; in a shorter series a step is a large share of its few differences, so the repeats'
    spread within DAG runs (pooled standard deviation / √repeats) stands in for it."""
    import numpy as np

    if len(levels) >= SHORT_SERIES or not any(len(run) > 1 for run in logs):
        steps = np.diff(levels)
        return 1.4826 * float(np.median(np.abs(steps - np.median(steps)))) / math.sqrt(2)
    spread = [run for run in logs if len(run) > 1]
    pooled = math.sqrt(sum(float(np.var(run, ddof=1)) * (len(run) - 1) for run in spread)
                       / sum(len(run) - 1 for run in spread))
    return pooled / math.sqrt(float(np.median([len(run) for run in spread])))


def mark_change_points(history: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One series' DAG runs (``history``: its store rows, with ``when``, ``status``,
    ``samples_per_sec`` and ``build`` where known; ``keys``: the columns naming a DAG run) in
    measured order: ``keys``, ``when``, ``build``, ``samples_per_sec`` (the median of its
    repeats), ``change_point`` (the level change starting at that DAG run, NaN elsewhere),
    ``change_p`` and ``previous_build`` (the build of the DAG run before a change point)."""
    keys = list(keys)
    ok = history[(history["status"] == "ok") & history["samples_per_sec"].notna()
                 & (pd.to_numeric(history["samples_per_sec"], errors="coerce") > 0)]
    if "build" not in ok.columns:
        ok = ok.assign(build=None)
    per_run = (ok.groupby(keys, as_index=False, dropna=False)
               .agg(when=("when", "min"), build=("build", "first"), samples_per_sec=("samples_per_sec", "median"),
                    repeats=("samples_per_sec", lambda speeds: [float(v) for v in speeds]))
               .sort_values("when", kind="stable").reset_index(drop=True))
    found = change_points(per_run.pop("repeats").tolist())
    per_run["change_point"], per_run["change_p"], per_run["previous_build"] = math.nan, math.nan, None
    for at, shift, p in found.itertuples(index=False):
        per_run.loc[at, ["change_point", "change_p"]] = shift, p
        per_run.loc[at, "previous_build"] = per_run.loc[at - 1, "build"]
    return per_run
