"""The scaling model: planted terms come back within their intervals, projections of a planted model
land in their prediction intervals at the stated rate, and the seed study's largest sizes are
predicted from its smaller ones, the error printed. Seeded throughout."""
import numpy as np
import pytest

from mxbench.results import scaling_model
from mxbench.results.scaling_model import Config, Point

PLANTED = np.array([0.1, 0.02, 0.0, 0.03])  # compute, device link, pairs without P2P, network (s a step)
SIZES = [Config(1, batch_per_device=64), Config(2, batch_per_device=64), Config(4, batch_per_device=64),
         Config(8, batch_per_device=64), Config(16, hosts=2, workers=2, servers=2, batch_per_device=64)]
SEED_IMAGES = 50_000  # CIFAR-10's training set: the seed's s/epoch -> samples/s


def planted_point(rng, config, repeats=3, noise=0.03):
    step = scaling_model.features(config) @ PLANTED
    steps = step * np.exp(rng.normal(0, noise, repeats))
    return Point(config, tuple(config.devices * config.batch_per_device / steps))


def seed_point(devices, sec_per_epoch, hosts=1, no_p2p=0.0):
    """A seed-study size at 128 images per GPU (one run each: the study's one measurement)."""
    workers = hosts
    return Point(Config(devices, hosts, workers, hosts if hosts > 1 else 0, 128, no_p2p),
                 (SEED_IMAGES / sec_per_epoch,))


SEED_SINGLE = [seed_point(1, 51), seed_point(2, 24), seed_point(4, 12)]  # docs/seed-study.md
SEED_8GPU = seed_point(8, 7.0, no_p2p=32 / 56)  # MXNet: "only 24 out of 56 GPU pairs are enabled direct access"
SEED_2X4 = seed_point(8, 6.5, hosts=2)


def test_planted_terms_come_back_within_their_intervals():
    covered, seeds = [], range(40)
    for seed in seeds:
        rng = np.random.default_rng(seed)
        model = scaling_model.fit([planted_point(rng, c) for c in SIZES], seed=seed, replicates=200)
        covered.append([model.coef_low[j] <= PLANTED[j] <= model.coef_high[j] for j in (0, 1, 3)])
        assert model.seen == (True, True, False, True)  # no size had pairs without P2P
    rate = np.mean(covered, axis=0)
    print(f"planted terms inside their 95% intervals: compute {rate[0]:.0%}, device link {rate[1]:.0%}, "
          f"network {rate[2]:.0%} of {len(seeds)} seeds")
    assert (rate >= 0.8).all()  # a percentile bootstrap over five sizes runs a little narrow, never far
    model = scaling_model.fit([planted_point(np.random.default_rng(0), c, repeats=6, noise=0.005) for c in SIZES])
    assert model.coef == pytest.approx(PLANTED, abs=0.004)


def test_projections_of_a_planted_model_land_in_their_prediction_intervals():
    hits, seeds = [], range(100)
    for seed in seeds:
        rng = np.random.default_rng(seed)
        model = scaling_model.fit([planted_point(rng, c) for c in SIZES], seed=seed, replicates=200)
        for guess in scaling_model.project(model)[-2:]:
            assert guess.projected and guess.config.devices in (32, 64)
            new = planted_point(rng, guess.config)
            measured = guess.config.devices * guess.config.batch_per_device / new.steps.mean()
            hits.append(guess.low <= measured <= guess.high)
    print(f"2x and 4x projections inside their 95% prediction intervals: {np.mean(hits):.1%} of {len(hits)}")
    assert np.mean(hits) >= 0.91  # 95% stated; 200 draws: a binomial sd of 1.5 points


def test_the_seed_studys_8_gpus_from_1_2_4_and_2_machines_from_one():
    for name, target, without in [("8 GPUs, one machine", SEED_8GPU, "pairs without P2P"),
                                  ("2 machines x 4 GPUs", SEED_2X4, "network")]:
        held = scaling_model.holdout(SEED_SINGLE + [target])
        naive = scaling_model.fit(SEED_SINGLE)  # no allowance: what a model blind to the term says
        flat = target.config.devices * 128 / naive.coef[0]
        print(f"seed {name} from 1, 2, 4 GPUs: predicted {held['predicted']:.0f} samples/s "
              f"[{held['low']:.0f}, {held['high']:.0f}], measured {held['measured']:.0f}: error {held['error']:+.1%} "
              f"(a model without the {without} term: {flat / held['measured'] - 1:+.1%})")
        assert held["inside"]
        assert abs(held["error"]) < 0.10
        assert any(line.startswith(without) for line in held["assumed"])
    # the study's own note: per-GPU throughput flat from 2 to 4 and down at 8, a model blind to it misses by 10-15%
    assert 0.10 < 8 * 128 / scaling_model.fit(SEED_SINGLE).coef[0] / scaling_model.holdout(SEED_SINGLE + [SEED_8GPU])[
        "measured"] - 1 < 0.15


def test_an_unseen_term_widens_the_interval_and_says_so():
    rng = np.random.default_rng(3)
    single = [planted_point(rng, c) for c in SIZES[:4]]
    two_hosts = Config(16, hosts=2, workers=2, servers=2, batch_per_device=64)
    blind = scaling_model.predict(scaling_model.fit(single), two_hosts)
    seen = scaling_model.predict(scaling_model.fit(single + [planted_point(rng, two_hosts)]), two_hosts)
    assert blind.assumed and not seen.assumed
    assert blind.high - blind.low > seen.high - seen.low
    prior = scaling_model.predict(scaling_model.fit(single), two_hosts, priors={"network": (0.01, 0.02)})
    assert "0.01" not in prior.assumed[0] and "ms a step" in prior.assumed[0]


def test_an_unknown_p2p_layout_widens_the_interval():
    rng = np.random.default_rng(4)
    model = scaling_model.fit([planted_point(rng, c) for c in SIZES[:3]])
    known = scaling_model.predict(model, Config(8, batch_per_device=64, no_p2p=0.0))
    unknown = scaling_model.predict(model, Config(8, batch_per_device=64, no_p2p=None))
    assert unknown.high - unknown.low > known.high - known.low
    assert any("P2P layout not known" in line for line in unknown.assumed)


def test_no_interval_without_spread_to_measure_it():
    one_run = scaling_model.fit([Point(Config(2, batch_per_device=32), (190.0,))])
    guess = scaling_model.predict(one_run, Config(4, batch_per_device=32))
    assert guess.high == np.inf and guess.low == 0  # one size, one run: no spread, no error bar
    two_sizes = scaling_model.fit([Point(Config(1, batch_per_device=32), (100.0,)),
                                   Point(Config(2, batch_per_device=32), (190.0,))])
    assert two_sizes.seen == (True, False, False, False)  # two points cannot carry a slope and a spread


def test_link_load_and_servers_wanted():
    assert scaling_model.link_load(2, 2, 2) == 0.5  # each worker's half for the other host's server, both ways
    assert scaling_model.link_load(2, 2, 1) == 1.0  # one server: the other host's whole gradient through its link
    assert scaling_model.link_load(4, 1, 4) == 0.0
    assert scaling_model.servers_wanted(Config(16, hosts=4, workers=4, servers=1)) == 4
    assert scaling_model.servers_wanted(Config(8)) is None


def test_efficiency_threshold_size():
    rng = np.random.default_rng(5)
    model = scaling_model.fit([planted_point(rng, c, noise=0.01) for c in SIZES])
    found = scaling_model.threshold_size(model, 0.8)
    assert found["earliest"] is not None and found["fit"] is not None and found["earliest"] <= found["fit"]
    assert scaling_model.threshold_size(model, 0.01)["fit"] is None
