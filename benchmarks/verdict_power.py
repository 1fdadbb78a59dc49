"""How small a launcher gap each design resolves, and at what false-call rate (issue 20, Figures).

Two launchers, a and b, n runs each, on one noise model: each run's log speed is the launcher's
true speed, plus normal noise of ``--cv``, plus a linear drift of ``--drift`` per run (the machine
warming up, a neighbour's load fading). Side by side, per n:

- landed: the landed rule (``verdict.compare``: unpaired, median ratio, bootstrap interval and
  permutation test) on blocked order, all of a then all of b, as ``airflow dags test`` ran it;
- landed, ABBA: the same rule on counterbalanced order (a b, b a, b a, a b, ...), to show how
  much the order alone buys;
- new: counterbalanced order analysed in pairs (``verdict.compare_paired``: per-round log ratios,
  t interval, exact sign-flip test).

For each: the false-call rate (identical launchers called slower or faster), and the detectable
gap: the smallest gap called in the right direction in 80% of trials whichever of the two
launchers is the slower one (a drift can help one direction and hide the other). Per hour: both
designs run 2n runs of ``--run-seconds``, so at equal n they take equal time; "gap x sqrt(h)" is
the gap a design would resolve with one hour of runs were its precision to keep growing as
sqrt(time) (blocked order does not: its drift bias grows with the runs).

Seeded; under two minutes on 2 cores at the defaults.

    python benchmarks/verdict_power.py [--cv 0.02] [--drift 0.005] [--run-seconds 15] [--trials 1000]
"""
import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from mxbench.floors import rounds_needed  # noqa: E402
from mxbench.verdict import ALPHA, LEVEL, POWER, _called, called_paired  # noqa: E402

SEED = 2020
ROUNDS = (4, 6, 8)


def blocked_order(n):
    return ["a"] * n + ["b"] * n


def abba_order(n):
    """a b, b a, b a, a b, ...: ``variants.round_order`` for two launchers."""
    return [x for r in range(n) for x in (("a", "b") if r % 4 in (0, 3) else ("b", "a"))]


def log_speeds(order, noise, drift, gap, slower):
    """Log speeds of ``order`` for each row of ``noise`` (trials x runs): the ``slower`` launcher
    down by log(1 + gap), every run ``drift`` above the one before."""
    trend = drift * np.arange(len(order))
    down = np.array([math.log1p(gap) if launcher == slower else 0.0 for launcher in order])
    return noise + trend - down


def split(order, rows):
    """(a's, b's) columns of ``rows`` in run order, and a's and b's of each round side by side."""
    a = [i for i, launcher in enumerate(order) if launcher == "a"]
    b = [i for i, launcher in enumerate(order) if launcher == "b"]
    return rows[:, a], rows[:, b]


def landed_calls(order, rows):
    """+1 where the landed rule calls a faster, -1 slower, 0 no call."""
    a, b = split(order, rows)
    calls = np.zeros(len(rows))
    for i, (x, y) in enumerate(zip(np.exp(a), np.exp(b))):
        if _called(x, y, ALPHA, LEVEL, resamples=1000):
            calls[i] = np.sign(np.median(x) / np.median(y) - 1)
    return calls


def paired_calls(order, rows):
    """+1 where the paired rule calls a faster, -1 slower, 0 no call. In ABBA order the k-th a
    and the k-th b are round k's."""
    a, b = split(order, rows)
    ratios = a - b
    return np.where(called_paired(ratios, ALPHA, LEVEL), np.sign(ratios.mean(axis=1)), 0.0)


DESIGNS = {"landed (blocked, unpaired)": (blocked_order, landed_calls),
           "landed rule, ABBA order": (abba_order, landed_calls),
           "new (ABBA, paired)": (abba_order, paired_calls)}


def false_call_rate(design, n, cv, drift, trials, rng):
    order_of, calls_of = DESIGNS[design]
    order = order_of(n)
    rows = log_speeds(order, rng.normal(0, cv, (trials, len(order))), drift, 0.0, None)
    return float(np.mean(calls_of(order, rows) != 0))


def detectable_gap(design, n, cv, drift, trials, rng, steps=7):
    """The smallest gap called in the right direction with POWER, whichever launcher is slower."""
    order_of, calls_of = DESIGNS[design]
    order = order_of(n)
    noise = rng.normal(0, cv, (trials, len(order)))  # the same noise at every gap: a monotone search

    def power(gap):
        return min(np.mean(calls_of(order, log_speeds(order, noise, drift, gap, slower)) == sign)
                   for slower, sign in (("a", -1), ("b", 1)))

    low, high = 0.0, 0.02
    while power(high) < POWER:
        if high > 4:
            return math.inf
        low, high = high, 2 * high
    for _ in range(steps):
        mid = (low + high) / 2
        low, high = (low, mid) if power(mid) >= POWER else (mid, high)
    return high


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cv", type=float, default=0.02, help="run-to-run noise, per run (0.02: 2%%)")
    parser.add_argument("--drift", type=float, default=0.005, help="linear drift per run (0.005: 0.5%%)")
    parser.add_argument("--run-seconds", type=float, default=15.0, help="one run's wall time")
    parser.add_argument("--trials", type=int, default=500,
                        help="simulated comparisons per power figure (twice as many per false-call rate)")
    parser.add_argument("--rounds", type=int, nargs="+", default=list(ROUNDS), help="n: runs of each launcher")
    args = parser.parse_args(argv)
    rounds = args.rounds
    started = time.monotonic()
    print(f"noise model: CV {args.cv:.1%} a run, drift {args.drift:+.2%} a run; {args.run_seconds:g} s a run; "
          f"α = {ALPHA}, {POWER:.0%} power; seeded, {2 * args.trials} trials a false-call rate, {args.trials} a "
          "power\n")
    figures = {}
    for n in rounds:
        hours = 2 * n * args.run_seconds / 3600
        for design in DESIGNS:
            rng = np.random.default_rng([SEED, n, list(DESIGNS).index(design)])
            rate = false_call_rate(design, n, args.cv, args.drift, 2 * args.trials, rng)
            gap = detectable_gap(design, n, args.cv, args.drift, args.trials, rng)
            figures[n, design] = (rate, gap, gap * math.sqrt(hours))
    width = max(map(len, DESIGNS))
    print(f"{'n a side':>8}  {'runs':>4}  {'minutes':>7}  {'design':<{width}}  {'false calls':>11}  "
          f"{'detectable gap':>14}  {'gap x sqrt(h)':>13}")
    for n in rounds:
        minutes = 2 * n * args.run_seconds / 60
        for design in DESIGNS:
            rate, gap, per_hour = figures[n, design]
            flag = " > α" if rate > ALPHA else ""
            gap_text, per_hour_text = (f"{gap:.1%}", f"{per_hour:.2%}") if math.isfinite(gap) else ("none", "none")
            print(f"{n:>8}  {2 * n:>4}  {minutes:>7.1f}  {design:<{width}}  {rate:>7.1%}{flag:<4}  {gap_text:>14}  "
                  f"{per_hour_text:>13}")
        print()
    landed, new = list(DESIGNS)[0], list(DESIGNS)[-1]
    ratios = [f"n = {n}: {figures[n, landed][1] / figures[n, new][1]:.1f}x" for n in rounds
              if math.isfinite(figures[n, new][1])]
    print("resolvable gap per hour, landed / new (equal n is equal time): " + ", ".join(ratios) + " (target ≥ 2x)")
    print(f"false calls at most: new {max(figures[n, new][0] for n in rounds):.1%}, "
          f"landed {max(figures[n, landed][0] for n in rounds):.1%} (α = {ALPHA:g})")
    best = {design: min(figures[n, design][2] for n in rounds) for design in (landed, new)}
    print(f"best gap x sqrt(h) over these n: landed {best[landed]:.2%}, new {best[new]:.2%} "
          f"({best[landed] / best[new]:.1f}x)")
    print(f"(fewer than {rounds_needed()} rounds paired cannot reach α at all: a sign-flip test over n rounds gives "
          f"p ≥ 2/2^n; {time.monotonic() - started:.0f} s)")

if __name__ == "__main__":
    main()
