"""How many probes a bisect takes to find a planted step among 8 builds (issue 21, Figure).

Builds b0 (known good) .. b7 (known bad); builds from position k on are ``--step`` slower. Each
probe measures a build with ``--repeats`` runs whose speeds have log-normal noise of ``--cv``
per run (this machine's A/A calibrations: 3-9%), and is judged by ``bisect.judge`` (the
regression DAG's rule, ``min_drop`` 5%) against the good build's repeats, measured once per
trial; ``bisect.next_step`` picks each probe. For every step position: the mean and maximum
number of probes, and how often the first bad build named was right, wrong, or left undecided
(contradicting probes). The good build's reference measurement is not a probe.

What is real: the bisect and the rule are the pipeline's own functions. What is simplified:
independent log-normal noise, no drift between DAG runs, no failed probes.

    .venv/airflow/bin/python benchmarks/bisect_probes.py [--trials 200] [--step 0.15]
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from mxbench.regression import bisect  # noqa: E402

BUILDS = [f"b{i}" for i in range(8)]


def one_bisect(step_at: int, step: float, cv: float, repeats: int, rng) -> bisect.Step:
    def sample(i):
        return list(100.0 * (1 - step if i >= step_at else 1.0) * rng.lognormal(0, cv, repeats))

    good = sample(0)
    probes = []
    while True:
        decision = bisect.next_step(BUILDS, probes)
        if decision.done:
            return decision
        probes.append(bisect.judge(decision.next_build, sample(BUILDS.index(decision.next_build)), good))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200, help="bisects per step position and noise level")
    parser.add_argument("--step", type=float, default=0.15, help="the planted slowdown (0.15: 15%%)")
    parser.add_argument("--cv", type=float, nargs="+", default=[0.03, 0.06, 0.09], help="noise per run")
    parser.add_argument("--repeats", type=int, nargs="+", default=[4, 6], help="runs per probe")
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print(f"planted step of {args.step:.0%} among {len(BUILDS)} builds (b0 good, b7 bad), {args.trials} trials each")
    print(f"{'cv':>5} {'repeats':>7} {'step at':>7} {'mean probes':>11} {'max probes':>10} {'right':>6} "
          f"{'wrong':>6} {'undecided':>9}")
    for cv in args.cv:
        for repeats in args.repeats:
            counts = []
            for step_at in range(1, len(BUILDS)):
                outcomes = [one_bisect(step_at, args.step, cv, repeats, rng) for _ in range(args.trials)]
                probes = [len(o.path) for o in outcomes]
                counts += probes
                right = np.mean([o.first_bad == BUILDS[step_at] for o in outcomes])
                undecided = np.mean([o.first_bad is None for o in outcomes])
                print(f"{cv:5.0%} {repeats:7d} {'b%d' % step_at:>7} {np.mean(probes):11.2f} {max(probes):10d} "
                      f"{right:6.0%} {1 - right - undecided:6.0%} {undecided:9.0%}")
            print(f"{cv:5.0%} {repeats:7d} {'all':>7} {np.mean(counts):11.2f} {max(counts):10d}")


if __name__ == "__main__":
    main()
