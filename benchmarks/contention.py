"""What a CPU hog a third of the time does to the demo's launcher verdicts, without and with the
contended-round handling (issue 31, Figures), side by side in one run.

The demo's design: three launchers (local, ssh, kubernetes) in counterbalanced rounds, 6 first,
two-stage up to ``--max-rounds`` with ``--target-gap``. Each run's log speed is its launcher's
true speed plus normal noise of ``--cv``; in a hogged round (probability ``--hog``: a neighbour
there a third of the time, for a round's length) each run is about ``--hog-slowdown`` slower, each
by its own share (50-150% of it), and is marked contended, as ``results.interference`` marks a run
whose hosts had other work.

- quiet: no hog;
- hog, as landed before: the contended runs are judged as measured;
- hog, handled: the stop rule plans from the first 6 quiet rounds and replaces each contended round
  by one more, from its own budget (``--replacements`` beyond ``--max-rounds``), and the verdict
  leaves the contended rounds out (``metrics.rounds_to_run`` and ``metrics.launcher_ratios`` with
  the runs' ``contended`` flags, the pipeline's own code).

For each: the k8s/ssh line's detectable gap (the smallest gap called "slower" in 80% of trials),
the false-call rate per line (identical launchers) and per report (any of the three lines), and the
mean number of rounds run. Target: with the hog and the handling, a detectable gap within 1.3x of
quiet and false calls at most α, per line and per report.

What is real: the stop rule (``metrics.rounds_to_run``), the verdict functions and the report's
family control. What is simplified: the rule reads rows, not run folders; every run of a round
decides alike.

    python benchmarks/contention.py [--trials 300] [--cv 0.02] [--hog 0.33] [--hog-slowdown 0.3] [--replacements N]
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from mxbench.results.metrics import launcher_ratios, rounds_to_run  # noqa: E402
from mxbench.stats.floors import ALPHA  # noqa: E402

LAUNCHERS = ("local", "ssh", "kubernetes")
ORDERS = [("local", "ssh", "kubernetes"), ("kubernetes", "ssh", "local"), ("ssh", "kubernetes", "local"),
          ("local", "kubernetes", "ssh")]


def one_round(rows, r, speeds, rng, cv, hog, slowdown, t):
    hogged = bool(rng.random() < hog)  # the hog comes for a round's time and goes: a third of the rounds
    for launcher in ORDERS[(r - 1) % len(ORDERS)]:
        log_speed = np.log(speeds[launcher]) + rng.normal(0, cv)
        if hogged:
            log_speed += np.log1p(-slowdown * rng.uniform(0.5, 1.5))
        rows.append({"variant": "cpu2h-bs64", "launcher": launcher, "repeat": r, "status": "ok",
                     "samples_per_sec": float(np.exp(log_speed)), "started_at": t, "ended_at": t + 1,
                     "contended": hogged})
        t += 2
    return t


def runs_round(rows, r, budget, handled) -> bool:
    """The stop rule's decision for optional round ``r`` of the three pairs, from the rounds before it:
    its own rule (``metrics.rounds_to_run``); as measured, blind to contention."""
    runs = pd.DataFrame(rows)
    if not handled:
        runs = runs.drop(columns=["contended"])
    return any(r <= rounds_to_run(runs, a, b, budget)[0]
               for a, b in (("ssh", "local"), ("kubernetes", "local"), ("kubernetes", "ssh")))


def trial(rng, gap_k8s, args, hog, handled):
    speeds = {"local": 1000.0, "ssh": 1000.0, "kubernetes": 1000.0 * (1 - gap_k8s)}
    rows, t = [], 0.0
    for r in range(1, 7):
        t = one_round(rows, r, speeds, rng, args.cv, hog, args.hog_slowdown, t)
    total = 6
    spare = args.max_rounds // 2 if args.replacements is None else args.replacements
    budget = (6, args.max_rounds, args.target_gap, spare if handled else 0)
    for r in range(7, args.max_rounds + budget[3] + 1):
        if not runs_round(rows, r, budget, handled):
            break
        t = one_round(rows, r, speeds, rng, args.cv, hog, args.hog_slowdown, t)
        total = r
    runs = pd.DataFrame(rows)
    if not handled:
        runs = runs.drop(columns=["contended"])
    lines = launcher_ratios(runs, budget=budget)
    return lines, total


def design(name, hog, handled, args, seed):
    rng = np.random.default_rng(seed)
    false_lines = false_reports = judged = 0
    rounds = []
    for _ in range(args.trials):
        lines, total = trial(rng, 0.0, args, hog, handled)
        rounds.append(total)
        called = lines["outcome"].isin(["slower", "faster"])
        false_lines += int(called.sum())
        judged += len(lines)
        false_reports += int(called.any())
    detectable = None
    for gap in np.arange(0.01, 0.31, 0.01):
        hits = 0
        for _ in range(max(args.trials // 3, 50)):
            lines, _ = trial(rng, gap, args, hog, handled)
            k8s = lines[(lines["launcher"] == "kubernetes") & (lines["reference"] == "ssh")]
            hits += int((k8s["outcome"] == "slower").any())
        if hits >= 0.8 * max(args.trials // 3, 50):
            detectable = gap
            break
    return {"design": name, "detectable k8s/ssh gap": detectable, "false calls per line": false_lines / judged,
            "false calls per report": false_reports / args.trials, "mean rounds": float(np.mean(rounds))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--cv", type=float, default=0.02)
    parser.add_argument("--hog", type=float, default=1 / 3, help="chance a run has a hog beside it")
    parser.add_argument("--hog-slowdown", type=float, default=0.3)
    parser.add_argument("--max-rounds", type=int, default=10)
    parser.add_argument("--target-gap", type=float, default=0.15)
    parser.add_argument("--replacements", type=int, default=None,
                        help="contended rounds replaced beyond --max-rounds (default: half of it)")
    args = parser.parse_args(argv)
    results = pd.DataFrame([design("quiet", 0.0, True, args, 1), design("hog, as measured", args.hog, False, args, 2),
                            design("hog, handled", args.hog, True, args, 3)])
    print(results.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    quiet, handled = results.iloc[0], results.iloc[2]
    if quiet["detectable k8s/ssh gap"] and handled["detectable k8s/ssh gap"]:
        print(f"detectable gap, hog handled / quiet: "
              f"{handled['detectable k8s/ssh gap'] / quiet['detectable k8s/ssh gap']:.2f}x (target <= 1.3x); "
              f"false calls per line {handled['false calls per line']:.3f}, per report "
              f"{handled['false calls per report']:.3f} (target <= α = {ALPHA})")


if __name__ == "__main__":
    main()
