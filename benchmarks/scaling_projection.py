"""Held-out prediction errors of the scaling model (issue 34, Tests and figures).

Two series, each fitted without its largest size and made to predict it (``scaling_model.holdout``):

- the seed study (docs/seed-study.md; one run per size, 128 images per GPU): 8 GPUs in one
  machine from 1, 2 and 4 GPUs, with the P2P layout MXNet logged (24 of 56 pairs), and 2 machines
  x 4 GPUs from the same single-machine sizes (no network facts given: an allowance);
- a planted series (compute 100 ms, device link 20 ms, network 30 ms per unit; 3% noise, 3 repeats)
  at 1, 2, 4, 8 GPUs and 2 x 8, over ``--seeds`` seeds: the share of held-out sizes inside their
  95% prediction interval, the errors' median and worst, and the same for the 2x and 4x projections.

What is real: the model, intervals and hold-out are the pipeline's own (``mxbench.results.scaling_model``).
What is simplified: the seed's numbers are its s/epoch turned into samples/s over 50,000 images;
the planted series is lognormal noise on an exact model, which real runs are not.

    python benchmarks/scaling_projection.py [--seeds 100]
"""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))
from mxbench.results import scaling_model  # noqa: E402
from mxbench.results.scaling_model import Config, Point  # noqa: E402

PLANTED = np.array([0.1, 0.02, 0.0, 0.03])
SIZES = [Config(1, batch_per_device=64), Config(2, batch_per_device=64), Config(4, batch_per_device=64),
         Config(8, batch_per_device=64), Config(16, hosts=2, workers=2, servers=2, batch_per_device=64)]


def seed_point(devices, sec_per_epoch, hosts=1, no_p2p=0.0):
    return Point(Config(devices, hosts, hosts, hosts if hosts > 1 else 0, 128, no_p2p), (50_000 / sec_per_epoch,))


def planted(rng, config, repeats=3, noise=0.03):
    steps = scaling_model.features(config) @ PLANTED * np.exp(rng.normal(0, noise, repeats))
    return Point(config, tuple(config.devices * config.batch_per_device / steps))


def seed_study():
    single = [seed_point(1, 51), seed_point(2, 24), seed_point(4, 12)]
    for name, target in [("8 GPUs, one machine (24/56 P2P pairs)", seed_point(8, 7.0, no_p2p=32 / 56)),
                         ("2 machines x 4 GPUs", seed_point(8, 6.5, hosts=2))]:
        h = scaling_model.holdout(single + [target])
        print(f"seed {name}: predicted {h['predicted']:.0f} samples/s [{h['low']:.0f}, {h['high']:.0f}], "
              f"measured {h['measured']:.0f}, error {h['error']:+.1%}, {'inside' if h['inside'] else 'OUTSIDE'}")
        for line in h["assumed"]:
            print(f"    assumed: {line}")


def planted_series(seeds: int):
    errors, inside, projected = [], [], []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        points = [planted(rng, c) for c in SIZES]
        h = scaling_model.holdout(points, seed=seed)
        errors.append(abs(h["error"]))
        inside.append(h["inside"])
        for guess in scaling_model.project(scaling_model.fit(points, seed=seed))[-2:]:
            new = planted(rng, guess.config)
            measured = guess.config.devices * guess.config.batch_per_device / new.steps.mean()
            projected.append(guess.low <= measured <= guess.high)
    print(f"planted, 2 x 8 GPUs held out, {seeds} seeds: inside its 95% interval {np.mean(inside):.1%}, "
          f"|error| median {np.median(errors):.1%}, worst {max(errors):.1%}")
    print(f"planted, 2x and 4x projections: inside their 95% interval {np.mean(projected):.1%} of {len(projected)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    args = parser.parse_args()
    seed_study()
    planted_series(args.seeds)


if __name__ == "__main__":
    main()
