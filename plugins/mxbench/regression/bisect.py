"""Bisecting MXNet builds: which build between a known good and a known bad one first got slower.

The builds are the versions manifest's entries from the good build to the bad one, in order. The
good build is measured first, as the reference; then each probe measures one build in between
with repeats and is judged by the regression DAG's own rule (``regression.regression_rule.check``: permutation
p, bootstrap interval and ``min_drop``) against the good build's repeats: a regression is "bad",
anything else measured is "good", and a probe with too few measured repeats is "failed". A
failed probe is said so and a neighbour is probed instead; when only failed builds are left
between the last good and the first bad build, the answer is the range of candidates, never a
guess. The known bad build is taken as bad (the regression DAG or the user named it), so among
8 builds (good, 6 between, bad) at most 3 probes name the first bad one. Pure: no Airflow, no
database.
"""
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence

import pandas as pd

from mxbench.regression import regression_rule
from mxbench.stats import verdict

GOOD, BAD, FAILED = "good", "bad", "failed"


@dataclass(frozen=True)
class Probe:
    """One measured build: ``status`` good | bad | failed, and the rule's words for it."""

    build: str
    status: str
    message: str = ""
    change: Optional[float] = None  # median speed / the good build's - 1


@dataclass
class Step:
    """What the bisect does next: probe ``next_build``, or it is ``done``, with the ``first_bad``
    build or, when failed probes leave several, the ``candidates`` (in order)."""

    done: bool
    next_build: Optional[str] = None
    first_bad: Optional[str] = None
    candidates: List[str] = field(default_factory=list)
    path: List[Probe] = field(default_factory=list)
    message: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def judge(build: str, speeds: Sequence[float], good_speeds: Sequence[float], variant: str = "",
          launcher: str = "", min_drop: float = regression_rule.MIN_DROP) -> Probe:
    """A probe's repeats (samples/s) against the good build's, by the regression DAG's rule."""
    finding = regression_rule.check(variant, launcher, speeds, good_speeds, min_drop=min_drop, min_baseline_runs=0)
    if finding.status == "regression":
        return Probe(build, BAD, finding.message, finding.change)
    if finding.status in ("ok", "improved"):
        return Probe(build, GOOD, finding.message, finding.change)
    # "no result" or too few repeats on a side: the probe did not measure, whatever the speeds say
    return Probe(build, FAILED, f"{build}: did not measure: {finding.message}")


def next_step(builds: Sequence[str], probes: Sequence[Probe]) -> Step:
    """``builds``: the ordered builds, ``builds[0]`` the good one and ``builds[-1]`` the bad one;
    ``probes``: the probes so far, in the order they were made, of builds strictly between."""
    if len(builds) < 2 or len(set(builds)) != len(builds):
        raise ValueError(f"a bisect needs a good and a bad build, each named once, not {list(builds)}")
    index = {build: i for i, build in enumerate(builds)}
    for probe in probes:
        if not 0 < index.get(probe.build, 0) < len(builds) - 1:
            raise ValueError(f"probe of {probe.build}, which is not between {builds[0]} and {builds[-1]}")
    status = {index[p.build]: p.status for p in probes}  # a build probed twice counts by its last probe
    bad = min([i for i, s in status.items() if s == BAD] + [len(builds) - 1])
    good = max([i for i, s in status.items() if s == GOOD and i < bad] + [0])
    path = list(probes)
    contradicting = [builds[i] for i, s in status.items() if s == GOOD and i > bad]
    if contradicting:  # noise or a step that went back: the data cannot name one first bad build
        return Step(True, path=path, candidates=list(builds[good + 1:]),
                    message=f"cannot name the first bad build: {builds[bad]} was judged bad but the later "
                            f"{', '.join(contradicting)} good; measure again with more repeats")
    open_ = [i for i in range(good + 1, bad) if i not in status]
    if open_:
        middle = (good + bad) // 2
        nearest = min(open_, key=lambda i: (abs(i - middle), i))
        why = "" if nearest == middle else f" ({builds[middle]} failed to measure: probing a neighbour)"
        return Step(False, next_build=builds[nearest], path=path,
                    message=f"probe {builds[nearest]}: the first bad build is after {builds[good]} and at or "
                            f"before {builds[bad]}{why}")
    failed = [builds[i] for i in range(good + 1, bad)]
    if failed:
        return Step(True, path=path, candidates=list(builds[good + 1:bad + 1]),
                    message=f"cannot name the first bad build: {', '.join(failed)} failed to measure; it is one of "
                            f"{', '.join(builds[good + 1:bad + 1])} (after {builds[good]})")
    return Step(True, first_bad=builds[bad], candidates=[builds[bad]], path=path,
                message=f"first bad build: {builds[bad]} (the last good: {builds[good]}; "
                        f"{len(path)} probe(s))")


def path_lines(step: Step) -> List[str]:
    """The probe path for a report: one line per probe, then the outcome."""
    lines = [f"{n}. {p.build}: {p.status}" + (f" ({p.change:+.1%})" if p.change is not None else "")
             for n, p in enumerate(step.path, 1)]
    return lines + [step.message]


def speeds_by_run(history: pd.DataFrame, run_ids: Sequence[str]) -> Dict[str, List[float]]:
    """Each DAG run's measured samples/s (its repeats with status ok) from store history rows."""
    ok = history[history["run_id"].isin(list(run_ids))]
    if "status" in ok.columns:
        ok = ok[ok["status"] == "ok"]
    return {run_id: regression_rule.usable_speeds(ok.loc[ok["run_id"] == run_id, "samples_per_sec"])
            for run_id in run_ids}


# --- builds of the versions manifest ----------------------------------------------------------

def label(build) -> str:
    """A manifest build as a bisect names it: its version, and its commit where it has one."""
    return build.version + (f"+{build.commit[:10]}" if build.commit else "")


def find_build(name: str, manifest: Sequence) -> int:
    """The index in ``manifest`` of the one build ``name`` names: its ``label`` (first), since date,
    package, version, or a prefix (7+ digits) of its commit. Raises ValueError naming the choices."""
    name = name.strip()
    by_label = [i for i, b in enumerate(manifest) if label(b) == name]
    if len(by_label) == 1:  # "1.6.0" is the release, though commits built on it share its version
        return by_label[0]
    found = [i for i, b in enumerate(manifest)
             if name in (label(b), str(b.since), b.package, b.version)
             or (b.commit and len(name) >= 7 and b.commit.startswith(name))]
    known = ", ".join(f"{label(b)} (since {b.since})" for b in manifest)
    if not found:
        raise ValueError(f"no build {name!r} in the versions manifest; it has {known}")
    if len(found) > 1:
        raise ValueError(f"{name!r} names {len(found)} builds of the versions manifest "
                         f"({', '.join(str(manifest[i].since) for i in found)}): name one by its since date")
    return found[0]


def builds_between(good: str, bad: str, manifest: Sequence) -> list:
    """The manifest's builds from ``good`` to ``bad``, both included, in order."""
    first, last = find_build(good, manifest), find_build(bad, manifest)
    if first >= last:
        raise ValueError(f"the good build {label(manifest[first])} (since {manifest[first].since}) must come "
                         f"before the bad build {label(manifest[last])} (since {manifest[last].since}) "
                         "in the versions manifest")
    chosen = list(manifest[first:last + 1])
    if len({label(b) for b in chosen}) != len(chosen):
        raise ValueError(f"two builds between {good} and {bad} share a version and commit: "
                         f"{[label(b) for b in chosen]}")
    return chosen


def probes_of(runs: Sequence[dict], speeds: Dict[str, List[float]], good: str, variant: str, launcher: str,
              min_drop: float = regression_rule.MIN_DROP) -> Optional[List[Probe]]:
    """The probes of a bisect's DAG runs (``{"build", "run_id"}`` in order; ``speeds`` by run id):
    each judged against the good build's latest reference run; None when the reference did not
    measure enough repeats (then nothing can be judged)."""
    references = [r for r in runs if r["build"] == good]
    if not references:
        return None
    reference = speeds.get(references[-1]["run_id"], [])
    if len(reference) < verdict.MIN_REPEATS:
        return None
    return [judge(r["build"], speeds.get(r["run_id"], []), reference, variant, launcher, min_drop)
            for r in runs if r["build"] != good]


def start_conf(step: Optional[dict], manifest: Sequence, variant: str, launcher: str) -> Optional[dict]:
    """The conf that starts a bisect of a step between two builds (its ``previous`` and
    ``build``: versions as the trainer reported them), or None when there is nothing to bisect: no
    step, a build the manifest does not name exactly once, or no manifest build between the two."""
    if not step:
        return None
    try:
        first, last = find_build(str(step["previous"]), manifest), find_build(str(step["build"]), manifest)
    except ValueError:
        return None
    if last - first < 2:
        return None
    return {"only_variants": [variant], "launchers": [launcher], "good_build": str(manifest[first].since),
            "bad_build": str(manifest[last].since)}


def regression_bisects(findings: Sequence[dict], build: Optional[str], manifest: Sequence) -> List[dict]:
    """The bisects a regression DAG run starts (``start_conf`` each, variant and launcher in it):
    one per regression (``findings``: ``regression_rule.Finding.to_dict()`` rows) whose baseline
    measured an earlier manifest build than this DAG run's ``build`` (a package, as the manifest
    names it) with manifest builds between the newest such one and it."""
    confs = []
    for finding in findings:
        if finding.get("status") != "regression" or not build:
            continue
        earlier = []
        for name in regression_rule.baseline_builds(finding.get("baseline_builds")):
            try:
                earlier.append(find_build(name, manifest))
            except ValueError:  # a build no longer in the manifest (or named twice): not bisectable
                continue
        try:
            now = find_build(build, manifest)
        except ValueError:
            continue
        earlier = [i for i in earlier if i < now]
        if not earlier:
            continue
        step = {"previous": str(manifest[max(earlier)].since), "build": str(manifest[now].since)}
        conf = start_conf(step, manifest, finding["variant"], finding["launcher"])
        if conf:
            confs.append(conf)
    return confs


def run_id_of(conf: dict) -> str:
    """The readable part of the first DAG run id of a bisect that ``conf`` (``start_conf``'s)
    starts: its variant, launcher and range (``store.run_id_for`` adds the part nobody can guess)."""
    return (f"bisect__{conf['only_variants'][0]}__{conf['launchers'][0]}__{conf['good_build']}__"
            f"{conf['bad_build']}")

