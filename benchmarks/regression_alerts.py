"""How often the regression DAG alerts on noise, and how often it catches a real step (issue 21, Figures).

Seeded nightly histories: each night checks ``--series`` series (variants x launchers) against a
baseline of ``--baseline-runs`` earlier DAG runs of ``--repeats`` repeats each. Each run's log speed
is the series' level plus normal noise of CV within the DAG run, plus a DAG-run effect of
``--between`` (shared by the run's repeats: a machine's day). Side by side, on the same nights:

- landed: ``regression_rule.check`` of the first ``--repeats`` rounds against the baseline, per series;
- confirmed + FDR: the DAG's rule now: a series whose first rounds look like a regression
  (``regression_rule.suspected``) gets ``--confirm-rounds`` more rounds, the rule judges every round,
  and ``regression_rule.controlled`` keeps a regression only where its Benjamini–Hochberg q over the
  night's series is below α.

Noise-only nights give the alerts per 100 series; nights where one series dropped by ``--step``
(the others noise-only) give the detection rate. ``--cv`` takes several values: by default this
machine's A/A within-run noise per launcher as the results store held it on 2026-12-04 (k8s 3.2%,
ssh 8.9%, local 12.8%) and 2%, a quiet GPU box's. Also printed: ``regression_rule.false_alerts_per_month``'s
figure for one nightly series, the estimate the report shows, to set beside the measured rate.

What is real: the rule, the suspicion test and the FDR control are the pipeline's own functions.
What is simplified: normal noise, every run measured, and confirmation rounds drawn from the
same DAG-run effect as the first rounds.

    python benchmarks/regression_alerts.py [--cv 0.032 0.089] [--nights 150] [--series 4] [--step 0.05]
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from mxbench.regression import regression_rule  # noqa: E402


def dag_run(rng, level, cv, between, repeats):
    return list(level * np.exp(rng.normal(0, between) + rng.normal(0, cv, repeats)))


def night(rng, args, cv, stepped):
    """(landed alerts, new alerts) over one night's series: lists of booleans, series 0 first."""
    landed, findings = [], []
    for s in range(args.series):
        baseline, ids = [], []
        for r in range(args.baseline_runs):
            baseline += dag_run(rng, 1000.0, cv, args.between, args.repeats)
            ids += [f"run{r}"] * args.repeats
        level = 1000.0 * (1 - args.step) if stepped and s == 0 else 1000.0
        effect = rng.normal(0, args.between)  # tonight's DAG run: its first and confirmation rounds alike
        first = list(level * np.exp(effect + rng.normal(0, cv, args.repeats)))
        finding = regression_rule.check("v", "l", first, baseline, ids, min_drop=args.min_drop)
        landed.append(finding.status == "regression")
        current = first
        if args.confirm_rounds and regression_rule.suspected(first, baseline, args.min_drop)[0]:
            current = first + list(level * np.exp(effect + rng.normal(0, cv, args.confirm_rounds)))
        findings.append(regression_rule.check("v", "l", current, baseline, ids, min_drop=args.min_drop))
    new = [f.status == "regression" for f in regression_rule.controlled(findings)]
    return landed, new


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cv", type=float, nargs="+", default=[0.02, 0.032, 0.089, 0.128])
    parser.add_argument("--between", type=float, default=0.0, help="DAG-run effect (log sd); A/A drift here: ~0")
    parser.add_argument("--nights", type=int, default=150)
    parser.add_argument("--series", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--confirm-rounds", type=int, default=4)
    parser.add_argument("--baseline-runs", type=int, default=5)
    parser.add_argument("--step", type=float, default=0.05)
    parser.add_argument("--min-drop", type=float, default=regression_rule.MIN_DROP,
                        help="the rule's smallest drop: a step of exactly this is caught about half the time")
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print(f"{args.nights} nights of {args.series} series; {args.repeats} repeats (+{args.confirm_rounds} to "
          f"confirm) against {args.baseline_runs} DAG runs x {args.repeats}; between-run sd {args.between:.1%}; "
          f"step {args.step:.0%}; min_drop {args.min_drop:.0%}")
    print(f"{'CV':>6} | {'alerts per 100 noise-only series':^34} | {'detection of the step':^24} | est. false/month")
    print(f"{'':>6} | {'landed':>16} {'confirmed+FDR':>17} | {'landed':>11} {'new':>12} |")
    for cv in args.cv:
        noise = [night(rng, args, cv, False) for _ in range(args.nights)]
        steps = [night(rng, args, cv, True) for _ in range(args.nights)]
        total = args.nights * args.series
        false_landed = 100 * sum(sum(a) for a, _ in noise) / total
        false_new = 100 * sum(sum(b) for _, b in noise) / total
        caught_landed = sum(a[0] for a, _ in steps) / args.nights
        caught_new = sum(b[0] for _, b in steps) / args.nights
        estimate = regression_rule.false_alert_chance(cv, args.repeats + args.confirm_rounds,
                                                 args.repeats * args.baseline_runs, first=args.repeats,
                                                 min_drop=args.min_drop) * 30
        print(f"{cv:>6.1%} | {false_landed:>16.2f} {false_new:>17.2f} | {caught_landed:>11.1%} {caught_new:>12.1%} | "
              f"{estimate:.2f}")
    print("\nalerts per 100 series: target <= 1 (confirmed + FDR); detection of a 5% step: target >= 95%")


if __name__ == "__main__":
    main()
