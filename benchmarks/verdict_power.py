"""How small a launcher gap each design resolves, and at what false-call rate (issue 20, Figures).

Two launchers, a and b, on one noise model: each run's log speed is the launcher's true speed,
plus normal noise of CV, plus a linear drift per run (the machine warming up, a neighbour's load
fading). The noise model is ``--cv`` and ``--drift``, or ``--noise-from`` an A/A calibration's
``tables/aa_noise.csv`` (one row per variant and launcher, of which the medians are used), or a
JSON ``{"cv": ..., "drift_per_run": ...}`` or ``{"entries": [...]}`` of them. Side by side:

- landed: the landed rule (``verdict.compare``: unpaired, median ratio, bootstrap interval and
  permutation test) on blocked order, all of a then all of b, as ``airflow dags test`` ran it;
- landed, ABBA: the same rule on counterbalanced order (a b, b a, b a, a b, ...), to show how
  much the order alone buys;
- new: counterbalanced order analysed in pairs (``verdict.compare_paired``: per-round log ratios,
  t interval, a paired t test while the ratios pass a normality check, else the exact sign-flip
  test), at n = 4, 6, 8 rounds;
- two-stage, the design the main job runs: ``floors.rounds_needed()`` rounds first, then as many
  rounds in all as ``verdict.rounds_planned`` plans from their spread (``--target-gap``, at most
  ``--max-rounds``), judged by ``verdict.compare_two_stage``. Its number of rounds is random.

For each: the false-call rate (identical launchers called slower or faster), with its binomial
standard error, and the detectable gap: the smallest gap called in the right direction in 80% of
trials whichever of the two launchers is the slower one (a drift can help one direction and hide
the other). Per hour: a design of n rounds runs 2n runs of ``--run-seconds`` (the two-stage one
its mean number); "gap x sqrt(h)" is the gap a design would resolve with one hour of runs were
its precision to keep growing as sqrt(time) (blocked order's does not: its drift bias grows with
the runs, so the figure flatters it).

What is real: the verdict rules are the pipeline's own functions, called as the report calls them
(the two-stage one per trial, exactly; the paired one through its vectorised form). What is
simplified: normal noise and a linear drift, one launcher pair, no failed runs, and no other
variant's runs between this pair's rounds.

Seeded; about a minute on 2 cores at the defaults.

    python benchmarks/verdict_power.py [--cv 0.02 --drift 0.005 | --noise-from <run folder>/tables/aa_noise.csv]
        [--run-seconds 15] [--trials 500] [--max-rounds 12] [--target-gap 0.05]
"""
import argparse
import csv
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from mxbench.stats.floors import rounds_needed  # noqa: E402
from mxbench.stats.verdict import (  # noqa: E402
    ALPHA,
    LEVEL,
    POWER,
    _called,
    called_paired,
    compare_two_stage,
    rounds_planned,
)

SEED = 2020
ROUNDS = (4, 6, 8)
DEFAULT_CV, DEFAULT_DRIFT = 0.02, 0.005
# the two-stage row costs little (no bootstrap), and it is the design the main job runs: a
# smaller standard error on its false-call rate is worth the second or two
TWO_STAGE_TRIALS_FACTOR = 4


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
    """(a's, b's) columns of ``rows`` in run order; in ABBA order the k-th a and the k-th b are
    round k's."""
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
    """+1 where the paired rule calls a faster, -1 slower, 0 no call."""
    a, b = split(order, rows)
    ratios = a - b
    return np.where(called_paired(ratios, ALPHA, LEVEL), np.sign(ratios.mean(axis=1)), 0.0)


def two_stage_verdicts(order, rows, target_gap, most):
    """(calls, rounds used) of the two-stage design for each row of ``rows`` (``most`` rounds of
    runs, of which each trial uses those its first stage plans): the pipeline's own
    ``rounds_planned`` and ``compare_two_stage``, one trial at a time."""
    first_n = rounds_needed()
    a, b = split(order, rows)
    calls, used = np.zeros(len(rows)), np.zeros(len(rows), int)
    for i, (x, y) in enumerate(zip(np.exp(a), np.exp(b))):
        pairs = list(zip(x.tolist(), y.tolist()))
        used[i], _ = rounds_planned(pairs[:first_n], target_gap, most)
        outcome = compare_two_stage(pairs[:used[i]], first_n).outcome
        calls[i] = {"faster": 1.0, "slower": -1.0}.get(outcome, 0.0)
    return calls, used


DESIGNS = {"landed (blocked, unpaired)": (blocked_order, landed_calls),
           "landed rule, ABBA order": (abba_order, landed_calls),
           "new (ABBA, paired)": (abba_order, paired_calls)}
LANDED, PAIRED, TWO_STAGE = list(DESIGNS)[0], list(DESIGNS)[-1], "two-stage (ABBA, paired)"


def false_calls(order, calls_of, cv, drift, trials, rng):
    """The calls ``calls_of`` makes on ``trials`` comparisons of identical launchers."""
    return calls_of(order, log_speeds(order, rng.normal(0, cv, (trials, len(order))), drift, 0.0, None))


def detectable_gap(order, calls_of, cv, drift, trials, rng, steps=7):
    """The smallest gap called in the right direction with POWER, whichever launcher is slower."""
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


def binomial_se(rate, trials):
    return math.sqrt(rate * (1 - rate) / trials)


def noise_from(path):
    """(cv, drift per run, where from) out of an A/A calibration's JSON: either one flat
    ``{"cv", "drift_per_run", "source"}`` or ``{"entries": [...]}`` of them per variant and
    launcher, of which the medians (entries with no cv or drift measured left out). A file that
    is neither raises ValueError naming it."""
    try:
        data = aa_noise_csv(path) if str(path).endswith(".csv") else json.loads(Path(path).read_text())
    except OSError as error:
        raise ValueError(f"--noise-from {path}: cannot read it ({error.strerror or error})") from None
    except ValueError as error:
        raise ValueError(f"--noise-from {path}: not JSON ({error})") from None
    shape = 'expected {"cv": ..., "drift_per_run": ...} or {"entries": [{"cv": ..., "drift_per_run": ...}, ...]}'
    if not isinstance(data, dict):
        raise ValueError(f"--noise-from {path}: {shape}, got a JSON {type(data).__name__}")
    source = f"; source: {data['source']}" if data.get("source") else ""
    if "entries" in data:
        entries = data["entries"]
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise ValueError(f"--noise-from {path}: 'entries' must be a list of objects; {shape}")
        measured = [e for e in entries if e.get("cv") is not None and e.get("drift_per_run") is not None]
        if not measured:
            raise ValueError(f"--noise-from {path}: none of its {len(entries)} entries has both a cv and a "
                             "drift_per_run")
        cvs = [_number(path, e, "cv") for e in measured]
        drifts = [_number(path, e, "drift_per_run") for e in measured]
        left_out = len(entries) - len(measured)
        where = (f"{path}: median of {len(measured)} (variant, launcher) entries"
                 + (f", {left_out} with no cv or drift left out" if left_out else "") + source)
        return _checked_cv(path, statistics.median(cvs)), statistics.median(drifts), where
    if "cv" not in data or "drift_per_run" not in data:
        raise ValueError(f"--noise-from {path}: {shape}; it has {sorted(data) or 'no keys'}")
    return _checked_cv(path, _number(path, data, "cv")), _number(path, data, "drift_per_run"), f"{path}{source}"


def aa_noise_csv(path) -> dict:
    """An A/A calibration's ``tables/aa_noise.csv`` (``mxbench.results.calibration.noise_floor``) as entries."""
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))

    def number(text):
        try:
            return float(text) if text not in (None, "") else None
        except ValueError:
            return text  # _number names it
    return {"entries": [{"variant": r.get("variant"), "launcher": r.get("launcher"), "cv": number(r.get("cv")),
                         "drift_per_run": number(r.get("drift_per_run"))} for r in rows],
            "source": "an A/A calibration's noise floor"}


def _number(path, entry, key):
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        where = f" (entry {entry.get('variant')}/{entry.get('launcher')})" if "variant" in entry else ""
        raise ValueError(f"--noise-from {path}: {key}{where} must be a finite number, got {value!r}")
    return float(value)


def _checked_cv(path, cv):
    if not 0 < cv < 1:
        raise ValueError(f"--noise-from {path}: cv {cv!r} is no run-to-run spread (0 < cv < 1, 0.02 for 2%)")
    return cv


def target_line(name, figures, best_landed, alpha_bound):
    """Does ``name`` resolve ≥ 2x smaller gaps per hour than the landed rule at its best n, with
    false calls ≤ α + 2 SE at every n it ran?"""
    rows = [f for f in figures if f["design"] == name]
    best = min(rows, key=lambda f: f["per_hour"])
    worst = max(rows, key=lambda f: f["rate"] - alpha_bound(f["trials"]))
    factor = best_landed["per_hour"] / best["per_hour"]
    within = worst["rate"] <= alpha_bound(worst["trials"])
    met = factor >= 2 and within
    return (f"  {name}: {'met' if met else 'NOT met'}: gap x sqrt(h) {best['per_hour']:.2%} ({best['label']}) "
            f"against {best_landed['per_hour']:.2%}, {factor:.1f}x (≥ 2x: {'yes' if factor >= 2 else 'no'}); "
            f"false calls at most {worst['rate']:.1%} ({worst['label']}), ≤ α + 2 SE = "
            f"{alpha_bound(worst['trials']):.1%}: {'yes' if within else 'no'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cv", type=float, help=f"run-to-run noise, per run (default {DEFAULT_CV}: 2%%)")
    parser.add_argument("--drift", type=float, help=f"linear drift per run (default {DEFAULT_DRIFT}: 0.5%%)")
    parser.add_argument("--noise-from", metavar="PATH",
                        help="an A/A calibration's tables/aa_noise.csv (or JSON): medians of its cv and drift_per_run")
    parser.add_argument("--run-seconds", type=float, default=15.0, help="one run's wall time")
    parser.add_argument("--trials", type=int, default=500,
                        help="simulated comparisons per power figure (twice as many per false-call rate; "
                             f"{TWO_STAGE_TRIALS_FACTOR}x both for the two-stage row)")
    parser.add_argument("--rounds", type=int, nargs="+", default=list(ROUNDS), help="n: runs of each launcher")
    parser.add_argument("--max-rounds", type=int, default=12, help="the two-stage design's budget of rounds")
    parser.add_argument("--target-gap", type=float, default=0.05,
                        help="the two-stage design's target: an interval of ±target/2")
    args = parser.parse_args(argv)
    if args.noise_from:
        if args.cv is not None or args.drift is not None:
            parser.error("--noise-from sets the cv and the drift: give it or --cv/--drift, not both")
        try:
            cv, drift, where = noise_from(args.noise_from)
        except ValueError as error:
            parser.error(str(error))
    else:
        cv = DEFAULT_CV if args.cv is None else args.cv
        drift = DEFAULT_DRIFT if args.drift is None else args.drift
        where = "--cv/--drift" if args.cv is not None or args.drift is not None else "the defaults"
    first_n = rounds_needed()
    if args.max_rounds < first_n:
        parser.error(f"--max-rounds {args.max_rounds} is below the first stage's {first_n} rounds")
    started = time.monotonic()
    print(f"noise model: CV {cv:.2%} a run, drift {drift:+.3%} a run, from {where}")
    print(f"{args.run_seconds:g} s a run; α = {ALPHA}, {POWER:.0%} power; seeded; two-stage: {first_n} rounds, "
          f"then up to {args.max_rounds} for ±{args.target_gap / 2:.1%} (target gap {args.target_gap:.0%})\n")

    def row(design, label, rounds_mean, order, calls_of, trials, rng):
        calls = false_calls(order, calls_of, cv, drift, 2 * trials, rng)
        rate = float(np.mean(calls != 0))
        gap = detectable_gap(order, calls_of, cv, drift, trials, rng)
        hours = 2 * rounds_mean * args.run_seconds / 3600
        return {"design": design, "label": label, "rounds": rounds_mean, "trials": 2 * trials, "rate": rate,
                "se": binomial_se(rate, 2 * trials), "gap": gap, "per_hour": gap * math.sqrt(hours)}

    figures = []
    for n in args.rounds:
        for index, (design, (order_of, calls_of)) in enumerate(DESIGNS.items()):
            rng = np.random.default_rng([SEED, n, index])
            figures.append(row(design, f"n = {n}", n, order_of(n), calls_of, args.trials, rng))
    # the rounds used do not depend on the gap (it shifts every round alike): count them on the null
    order = abba_order(args.max_rounds)
    two_stage_trials = TWO_STAGE_TRIALS_FACTOR * args.trials
    rng = np.random.default_rng([SEED, args.max_rounds, len(DESIGNS)])
    null_rows = log_speeds(order, rng.normal(0, cv, (2 * two_stage_trials, len(order))), drift, 0.0, None)
    used = two_stage_verdicts(order, null_rows, args.target_gap, args.max_rounds)[1]
    figures.append(row(TWO_STAGE, f"{used.mean():.1f} rounds", float(used.mean()), order,
                       lambda o, r: two_stage_verdicts(o, r, args.target_gap, args.max_rounds)[0],
                       two_stage_trials, np.random.default_rng([SEED, args.max_rounds, len(DESIGNS) + 1])))

    width = max(map(len, [*DESIGNS, TWO_STAGE]))
    print(f"{'n a side':>8}  {'runs':>5}  {'minutes':>7}  {'design':<{width}}  {'trials':>6}  "
          f"{'false calls ± SE':>17}  {'detectable gap':>14}  {'gap x sqrt(h)':>13}")
    def alpha_bound(trials):  # what a false-call rate of exactly α could read, at 2 standard errors
        return ALPHA + 2 * binomial_se(ALPHA, trials)

    for index, f in enumerate(figures):
        flag = " > α" if f["rate"] > alpha_bound(f["trials"]) else ""
        gap_text, per_hour_text = (f"{f['gap']:.1%}", f"{f['per_hour']:.2%}") if math.isfinite(f["gap"]) \
            else ("none", "none")
        rounds_text = f"{f['rounds']:.0f}" if f["design"] != TWO_STAGE else f"{f['rounds']:.1f} mean"
        print(f"{rounds_text:>8}  {2 * f['rounds']:>5.0f}  {2 * f['rounds'] * args.run_seconds / 60:>7.1f}  "
              f"{f['design']:<{width}}  {f['trials']:>6}  {f['rate']:>6.1%} ± {f['se']:.1%}{flag:<4}  "
              f"{gap_text:>14}  {per_hour_text:>13}")
        if index % len(DESIGNS) == len(DESIGNS) - 1:
            print()
    counts = np.bincount(used, minlength=args.max_rounds + 1)[first_n:]
    print(f"two-stage rounds used ({len(used)} null trials): mean {used.mean():.2f}, "
          + ", ".join(f"{first_n + k}: {c / len(used):.0%}" for k, c in enumerate(counts) if c)
          + f"; {2 * used.mean():.1f} runs, {3600 / args.run_seconds / (2 * used.mean()):.1f} comparisons an hour\n")

    by = {(f["design"], f["label"]): f for f in figures}
    ratios = [f"n = {n}: {by[LANDED, f'n = {n}']['gap'] / by[PAIRED, f'n = {n}']['gap']:.1f}x" for n in args.rounds
              if math.isfinite(by[PAIRED, f"n = {n}"]["gap"])]
    print("resolvable gap, landed / new paired at equal n (equal time): " + ", ".join(ratios))
    landed_rows = [f for f in figures if f["design"] == LANDED]
    best_landed = min(landed_rows, key=lambda f: f["per_hour"])
    worst_landed = max(landed_rows, key=lambda f: f["rate"])
    print(f"target: ≥ 2x smaller gap per hour (gap x sqrt(h), each design at its best n) than the landed blocked "
          f"rule at its best ({best_landed['per_hour']:.2%}, {best_landed['label']}), false calls ≤ α + 2 SE:")

    for name in (PAIRED, TWO_STAGE):
        print(target_line(name, figures, best_landed, alpha_bound))
    if worst_landed["rate"] > alpha_bound(worst_landed["trials"]):
        print(f"  (the landed blocked rule itself calls {worst_landed['rate']:.0%} of identical launchers different "
              f"at {worst_landed['label']}: its gaps are at a false-call rate above α, which flatters it)")
    print(f"(fewer than {first_n} rounds paired, the sign-flip test that non-normal ratios fall back to cannot "
          f"reach α: it gives p ≥ 2/2^n; {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
