"""How long ``compare``'s detectable gap takes to compute for a new (n, m), before and after
issue 43, side by side in one run: the trial-by-trial simulation (``_called`` on one trial at a
time, as first written) and the vectorised one (``_called_rows``: every trial at once, the rule's
resamples and splits computed once for every gap). Both are seeded alike, so the gaps must be equal.

What is real: the pipeline's own rule and search. Each figure is the first computation (the
cache cleared), one run each, on however busy the machine is: `uptime` alongside.

    python benchmarks/detectable_gap.py [--sizes 6x6 8x8 7x5 12x12]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from mxbench.stats.verdict import ALPHA, LEVEL, POWER, SEED, _called, _detectable_in_sd  # noqa: E402


def trial_by_trial(n, m, alpha, trials=200, steps=9):
    """The detectable gap as first computed: the same search, ``_called`` on one trial at a time."""
    rng = np.random.default_rng(SEED)
    noise = [(rng.normal(size=n), rng.normal(size=m)) for _ in range(trials)]

    def detected(gap):
        return np.mean([_called(np.exp(x - gap), np.exp(y), alpha, LEVEL, resamples=1000) for x, y in noise])

    low, high = 0.0, 2.0
    while detected(high) < POWER and high < 64:
        low, high = high, 2 * high
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (low, mid) if detected(mid) >= POWER else (mid, high)
    return high


def timed(compute, *args):
    start = time.perf_counter()
    gap = compute(*args)
    return gap, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["6x6", "8x8", "7x5", "12x12"],
                        help="repeats a side, n x m")
    args = parser.parse_args(argv)
    print(f"{'n x m':>7}  {'α':>6}  {'gap (SD)':>9}  {'trial by trial':>14}  {'vectorised':>10}  {'speed-up':>8}")
    for size in args.sizes:
        n, m = (int(side) for side in size.split("x"))
        for alpha in (ALPHA, ALPHA / 3):
            old, old_s = timed(trial_by_trial, n, m, alpha)
            _detectable_in_sd.cache_clear()
            new, new_s = timed(_detectable_in_sd, n, m, alpha, POWER, LEVEL)
            if new != old:
                sys.exit(f"{size} at α = {alpha:.4f}: vectorised {new} != trial by trial {old}")
            print(f"{size:>7}  {alpha:>6.4f}  {new:>9.3f}  {old_s:>12.2f} s  {new_s:>8.2f} s  {old_s / new_s:>7.0f}x")


if __name__ == "__main__":
    main()
