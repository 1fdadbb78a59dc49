"""Bisecting builds (mxbench.regression.bisect): planted steps are found in at most 3 probes among 8 builds,
by the regression rule on noisy repeats; a probe that fails to measure is said so and a neighbour
is probed; failed builds that hide the step leave candidates, never a guess."""
import datetime as dt

import numpy as np
import pandas as pd
import pytest

from mxbench.regression import bisect
from mxbench.regression.bisect import BAD, FAILED, GOOD, Probe

BUILDS = [f"b{i}" for i in range(8)]  # b0 good, b7 bad


def run_bisect(builds, measure, limit=20):
    """Probe until done; ``measure(build) -> Probe``."""
    probes = []
    for _ in range(limit):
        step = bisect.next_step(builds, probes)
        if step.done:
            return step
        probes.append(measure(step.next_build))
    raise AssertionError(f"no answer after {limit} probes: {probes}")


def exact(step_at, failing=()):
    def measure(build):
        i = BUILDS.index(build)
        if build in failing:
            return Probe(build, FAILED)
        return Probe(build, BAD if i >= step_at else GOOD)
    return measure


@pytest.mark.parametrize("step_at", range(1, 8))
def test_a_planted_step_is_found_in_at_most_3_probes(step_at):
    step = run_bisect(BUILDS, exact(step_at))
    assert step.first_bad == f"b{step_at}"
    assert len(step.path) <= 3
    assert all(0 < BUILDS.index(p.build) < 7 for p in step.path)  # the known ends are never probed
    assert len({p.build for p in step.path}) == len(step.path)


def test_the_first_probe_is_the_midpoint_and_the_path_is_reported():
    first = bisect.next_step(BUILDS, [])
    assert not first.done and first.next_build == "b3"
    step = run_bisect(BUILDS, exact(5))
    assert [p.build for p in step.path] == ["b3", "b5", "b4"]
    lines = bisect.path_lines(step)
    assert lines[:3] == ["1. b3: good", "2. b5: bad", "3. b4: good"]
    assert lines[-1].startswith("first bad build: b5 (the last good: b4")


def test_adjacent_good_and_bad_need_no_probe():
    step = bisect.next_step(["v1", "v2"], [])
    assert step.done and step.first_bad == "v2" and step.path == []


@pytest.mark.parametrize("step_at", range(1, 8))
def test_a_noisy_history_is_bisected_by_the_regression_rule(step_at):
    """Repeats with 5% noise, a 20% step: each probe judged against the good build's repeats."""
    rng = np.random.default_rng(step_at)
    speed = lambda i: 100.0 * (0.8 if i >= step_at else 1.0)  # noqa: E731
    sample = lambda i: list(speed(i) * rng.lognormal(0, 0.05, 5))  # noqa: E731
    good = sample(0)
    step = run_bisect(BUILDS, lambda b: bisect.judge(b, sample(BUILDS.index(b)), good, "cpu1-bs64", "local"))
    assert step.first_bad == f"b{step_at}"
    assert len(step.path) <= 3
    bad_probes = [p for p in step.path if p.status == BAD]
    assert all(p.change < -0.05 and "regression" in p.message for p in bad_probes)


def test_judge_uses_the_rule_and_min_drop():
    good = [100, 101, 99, 100.5, 99.5]
    slower = [96, 96.5, 95.5, 96.2, 95.8]  # 4% slower: certain, but under the 5% minimum drop
    assert bisect.judge("b1", slower, good).status == GOOD
    assert bisect.judge("b1", slower, good, min_drop=0.03).status == BAD
    assert bisect.judge("b1", [x * 0.9 for x in good], good).status == BAD
    assert bisect.judge("b1", [x * 1.2 for x in good], good).status == GOOD  # faster is not the step


def test_a_probe_without_enough_repeats_failed_to_measure():
    good = [100, 101, 99, 100.5, 99.5]
    for speeds in ([], [float("nan")] * 5, [80.0, 81.0]):
        probe = bisect.judge("b3", speeds, good)
        assert probe.status == FAILED and probe.message.startswith("b3: did not measure")


def test_a_failed_probe_is_said_and_a_neighbour_is_probed():
    step = bisect.next_step(BUILDS, [Probe("b3", FAILED)])
    assert not step.done and step.next_build in ("b2", "b4")
    assert "b3 failed to measure: probing a neighbour" in step.message
    done = run_bisect(BUILDS, exact(5, failing={"b3"}))
    assert done.first_bad == "b5"
    assert [p.build for p in done.path][0] == "b3" and done.path[0].status == FAILED


def test_failed_builds_next_to_the_step_leave_candidates_not_a_guess():
    step = run_bisect(BUILDS, exact(4, failing={"b4"}))
    assert step.first_bad is None and step.done
    assert step.candidates == ["b4", "b5"]
    assert "b4 failed to measure" in step.message and "one of b4, b5" in step.message


def test_every_probe_failing_ends_with_all_candidates():
    step = run_bisect(BUILDS, exact(4, failing=set(BUILDS[1:7])))
    assert step.first_bad is None and step.candidates == BUILDS[1:]
    assert len(step.path) == 6


def test_contradicting_probes_name_no_build():
    step = bisect.next_step(BUILDS, [Probe("b3", BAD), Probe("b5", GOOD)])
    assert step.done and step.first_bad is None
    assert "b3 was judged bad but the later b5 good" in step.message


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="not between b0 and b7"):
        bisect.next_step(BUILDS, [Probe("b7", BAD)])
    with pytest.raises(ValueError, match="each named once"):
        bisect.next_step(["a", "a"], [])


def test_speeds_by_run_keeps_measured_repeats_of_those_runs():
    history = pd.DataFrame({"run_id": ["r1", "r1", "r1", "r2", "r3"], "status": ["ok", "failed", "ok", "ok", "ok"],
                            "samples_per_sec": [10.0, None, 11.0, 20.0, 30.0]})
    assert bisect.speeds_by_run(history, ["r1", "r2", "r4"]) == {"r1": [10.0, 11.0], "r2": [20.0], "r4": []}


def manifest_of(*entries):
    """Builds as the manifest loads them: (since, package, commit)."""
    from datetime import date

    from mxbench.builds.mxnet_builds import Build

    return [Build(date.fromisoformat(since), package, "img", commit=commit) for since, package, commit in entries]


MANIFEST = manifest_of(("2026-01-01", "mxnet==1.8.0", None), ("2026-01-05", "mxnet==1.8.0", "abcdef0123456"),
                       ("2026-02-01", "mxnet==1.9.0", None), ("2026-03-01", "mxnet==1.9.1", None))


def test_builds_are_named_by_label_date_package_version_or_commit():
    assert [bisect.label(b) for b in MANIFEST] == ["1.8.0", "1.8.0+abcdef0123", "1.9.0", "1.9.1"]
    assert bisect.find_build("1.8.0", MANIFEST) == 0  # the release's label, though the commit shares its version
    assert bisect.find_build("abcdef0", MANIFEST) == 1
    assert bisect.find_build("2026-01-05", MANIFEST) == 1
    assert bisect.find_build("mxnet==1.9.0", MANIFEST) == 2
    with pytest.raises(ValueError, match=r"'mxnet==1.8.0' names 2 builds .*2026-01-01, 2026-01-05"):
        bisect.find_build("mxnet==1.8.0", MANIFEST)
    with pytest.raises(ValueError, match=r"no build '2.0' in the versions manifest; it has 1.8.0 \(since 2026-01-01\)"):
        bisect.find_build("2.0", MANIFEST)
    with pytest.raises(ValueError, match="no build 'abc'"):  # too short a commit prefix names nothing
        bisect.find_build("abc", MANIFEST)


def test_builds_between_good_and_bad_in_manifest_order():
    assert [bisect.label(b) for b in bisect.builds_between("1.8.0", "1.9.1", MANIFEST)] == \
        ["1.8.0", "1.8.0+abcdef0123", "1.9.0", "1.9.1"]
    with pytest.raises(ValueError, match=r"the good build 1.9.1 \(since 2026-03-01\) must come before the bad build "
                                         r"1.9.0"):
        bisect.builds_between("1.9.1", "1.9.0", MANIFEST)


def test_probes_of_dag_runs_are_judged_against_the_latest_reference():
    runs = [{"build": "b0", "run_id": "r0"}, {"build": "b3", "run_id": "r1"}, {"build": "b0", "run_id": "r2"},
            {"build": "b5", "run_id": "r3"}]
    speeds = {"r0": [50.0] * 5, "r1": [80.0, 80.5, 79.5, 80.2, 79.8], "r2": [100.0, 101, 99, 100.5, 99.5],
              "r3": [100.2, 99.8, 100.4, 99.6, 100.0]}
    probes = bisect.probes_of(runs, speeds, "b0", "cpu1-bs64", "local")
    assert [(p.build, p.status) for p in probes] == [("b3", BAD), ("b5", GOOD)]  # against r2, not r0
    assert bisect.probes_of(runs, {**speeds, "r2": [100.0, 99.0]}, "b0", "v", "l") is None  # too few to judge by
    assert bisect.probes_of(runs[1:2], speeds, "b0", "v", "l") is None


def test_a_step_the_regression_dag_found_starts_a_bisect_only_with_builds_between():
    conf = bisect.start_conf({"previous": "1.8.0", "build": "1.9.1"}, MANIFEST, "cpu1-bs64", "local")
    assert conf == {"only_variants": ["cpu1-bs64"], "launchers": ["local"], "good_build": "2026-01-01",
                    "bad_build": "2026-03-01"}
    assert bisect.start_conf({"previous": "1.9.0", "build": "1.9.1"}, MANIFEST, "v", "l") is None  # adjacent
    assert bisect.start_conf({"previous": "1.7.0", "build": "1.9.1"}, MANIFEST, "v", "l") is None  # not in it
    assert bisect.start_conf(None, MANIFEST, "v", "l") is None


def test_a_regression_between_builds_with_builds_between_starts_a_bisect():
    from mxbench.builds.mxnet_builds import load_manifest
    from mxbench.regression.bisect import regression_bisects

    manifest = load_manifest()  # config/mxnet-builds.json: 1.6.0, 1.7.0.post2, 1.8.0.post0, 1.9.0, 1.9.1
    regressed = {"variant": "cpu1-bs64", "launcher": "ssh", "status": "regression",
                 "baseline_builds": "mxnet==1.6.0; mxnet==1.7.0.post2"}
    (conf,) = regression_bisects([regressed], "mxnet==1.9.1", manifest)
    # from the newest baseline build before this one: 1.7.0.post2 (since 2026-10-01) to 1.9.1
    assert conf == {"only_variants": ["cpu1-bs64"], "launchers": ["ssh"], "good_build": "2026-10-01",
                    "bad_build": "2026-11-08"}
    assert regression_bisects([{**regressed, "status": "ok"}], "mxnet==1.9.1", manifest) == []
    # neighbours in the manifest: nothing between them to bisect
    assert regression_bisects([{**regressed, "baseline_builds": "mxnet==1.9.0"}], "mxnet==1.9.1", manifest) == []
    # the same build (a slower machine day, not a build): nothing to bisect; unknown builds: skipped
    assert regression_bisects([{**regressed, "baseline_builds": "mxnet==1.9.1"}], "mxnet==1.9.1", manifest) == []
    assert regression_bisects([{**regressed, "baseline_builds": "mxnet==0.1"}], "mxnet==1.9.1", manifest) == []


def test_a_baseline_of_wheel_builds_starts_a_bisect_too():
    """A build by commit is a wheel, whose package has spaces: the finding's cell keeps it whole."""
    from mxbench.builds.mxnet_builds import Build
    from mxbench.regression.bisect import regression_bisects
    from mxbench.regression.regression_rule import Finding

    wheel = "mxnet @ https://example.org/mxnet-1.9.0-py3-none-any.whl#sha256=" + "a" * 64
    manifest = [Build(since=dt.date(2026, 11, day), package=package, image="mxbench-train:x")
                for day, package in ((1, "mxnet==1.8.0.post0"), (2, wheel), (3, "mxnet==1.9.0.post1"),
                                     (4, "mxnet==1.9.1"))]
    finding = Finding("cpu1-bs64", "local", "regression", baseline_builds=[wheel]).to_dict()
    (conf,) = regression_bisects([finding], "mxnet==1.9.1", manifest)
    assert (conf["good_build"], conf["bad_build"]) == ("2026-11-02", "2026-11-04")

