"""The bisect DAG's own tasks (mxbench_bisect); the measuring ones are the pipeline's (``dag_tasks``).

One DAG run measures one build: the good build first (the reference), then each probe that
``mxbench.bisect`` picks. ``resolve_probe`` takes the build from the params (not from the date),
``decide`` reads this bisect's DAG runs back from the results store, judges each probe against
the reference by the regression rule and picks the next build or names the first bad one, and
``next_probe`` triggers the next DAG run with the bisect's state in its conf (``bisect_runs``:
each earlier DAG run and the build it measured; ``probe_build``: what it measures).
"""
from __future__ import annotations

from typing import Dict

from airflow.sdk import task

from .variants import REGRESSION_PARAMS_SCHEMA

_BUILD_NAME = ("As the versions manifest (config/mxnet-builds.json) names it: a since date (2026-11-04), a "
               "version (1.9.0), a package (mxnet==1.9.0) or 7+ digits of a commit.")

BISECT_PARAMS_SCHEMA: Dict[str, dict] = {
    # a probe is judged against the good build's DAG run, not the store's baseline: none of its knobs
    **{name: schema for name, schema in REGRESSION_PARAMS_SCHEMA.items()
       if name not in ("baseline_runs", "confirm_rounds", "bisect")},
    "only_variants": {**REGRESSION_PARAMS_SCHEMA["only_variants"], "default": ["cpu1-bs64"], "minItems": 1,
                      "maxItems": 1, "title": "Variant",
                      "description": "The one variant id (from the preset) that got slower."},
    "launchers": {**REGRESSION_PARAMS_SCHEMA["launchers"], "maxItems": 1, "title": "Launcher",
                  "description": "The one launcher it got slower under."},
    "good_build": {"type": "string", "minLength": 1, "title": "Good build", "section": "Bisect",
                   "description": "The last build known to be fast. " + _BUILD_NAME},
    "bad_build": {"type": "string", "minLength": 1, "title": "Bad build", "section": "Bisect",
                  "description": "A later build known to be slow. " + _BUILD_NAME},
    # the bisect's own state, which each DAG run hands to the next: empty when a person starts one
    "probe_build": {"default": "", "type": "string", "title": "Build this DAG run measures", "section": "Bisect",
                    "description": "Leave empty: the first DAG run measures the good build, the next ones the "
                                   "builds the bisect picks."},
    "bisect_runs": {"default": [], "type": "array", "title": "Earlier DAG runs of this bisect", "section": "Bisect",
                    "items": {"type": "object", "required": ["build", "run_id"],
                              "properties": {"build": {"type": "string"}, "run_id": {"type": "string"}}},
                    "description": "Leave empty: filled in by the bisect."},
}


def _plan(params) -> tuple:
    """The builds from good to bad (manifest entries), the one this DAG run measures, and its label."""
    from mxbench import bisect, builds

    chosen = bisect.builds_between(params["good_build"], params["bad_build"], builds.load_manifest())
    labels = [bisect.label(b) for b in chosen]
    probe = params.get("probe_build") or labels[0]  # the first DAG run measures the reference
    if probe not in labels:
        raise ValueError(f"probe_build {probe!r} is not one of the builds from {labels[0]} to {labels[-1]}: {labels}")
    for earlier in params.get("bisect_runs") or []:
        if earlier["build"] not in labels:
            raise ValueError(f"bisect_runs names {earlier['build']!r}, not one of {labels}")
    return chosen, labels, chosen[labels.index(probe)], probe


@task
def resolve_probe(params=None, dag_run=None) -> dict:
    """The build this DAG run measures, as ``dag_tasks.resolve_build`` gives a date's: its record
    (package, commit, image, install spec, local interpreter or why it cannot run here) and its
    bisect ``label``. A bad good/bad pair fails the DAG run here, naming the cause."""
    from airflow.sdk.exceptions import AirflowFailException

    from mxbench import builds
    from mxbench_train.errors import MxbenchError

    try:
        _, labels, build, probe = _plan(params)
    except (ValueError, MxbenchError) as exc:
        raise AirflowFailException(f"bisect from {params['good_build']!r} to {params['bad_build']!r}: {exc}") from None
    record = {"package": build.package, "version": build.version, "commit": build.commit, "image": build.image,
              "since": str(build.since), "spec": None, "python": None, "unsupported": None, "label": probe}
    try:
        record["spec"] = builds.install_spec(build)
        if "local" in params["launchers"]:
            record["python"] = builds.python_for(build)
            record["unsupported"] = builds.check_trainer(record["python"])
    except MxbenchError as exc:  # the local runs fail with this cause; decide probes a neighbour
        record["unsupported"] = str(exc)
    print(f"mxbench: bisect {labels[0]} .. {labels[-1]}: this DAG run measures {probe} "
          f"({builds.shown(build.package)}): {record['unsupported'] or record['python'] or 'no local runs'}")
    return record


@task(trigger_rule="all_done", multiple_outputs=True)  # a probe whose runs failed is still decided on
def decide(build: dict, params=None, run_id=None, dag_run=None) -> dict:
    """This bisect's DAG runs so far, judged; the next build to probe or the first bad build."""
    from mxbench import bisect, connections, store
    from mxbench.dag_tasks import dag_folder
    from mxbench.run_folder import write_json

    _, labels, _, probe = _plan(params)
    runs = list(params.get("bisect_runs") or []) + [{"build": probe, "run_id": run_id}]
    variant, launcher = params["only_variants"][0], params["launchers"][0]
    url = connections.results_url(params)
    with store.errors_without_password(url):
        history = store.history(url, variant=variant, launcher=launcher, dag_ids=[dag_run.dag_id])
    speeds = bisect.speeds_by_run(history, [r["run_id"] for r in runs])
    probes = bisect.probes_of(runs, speeds, labels[0], variant, launcher, params["min_drop"])
    if probes is None:  # without the reference no probe can be judged: measure it again, never guess
        step = bisect.Step(True, message=f"the good build {labels[0]} measured too few repeats to judge against "
                                         f"(its DAG runs: {[r['run_id'] for r in runs if r['build'] == labels[0]]}); "
                                         "start the bisect again")
    else:
        step = bisect.next_step(labels, probes)
    title = f"bisect of {variant} ({launcher}) from {labels[0]} to {labels[-1]}"
    print(f"mxbench: {title}, probe path:")
    for line in bisect.path_lines(step):
        print(f"  {line}")
    with dag_folder(dag_run, run_id, "decide", tables=True) as dag_dir:  # for the report
        write_json(dag_dir / "tables" / "bisect.json", {"title": title, "path": bisect.path_lines(step)})
    return {"done": step.done, "first_bad": step.first_bad, "candidates": step.candidates,
            "message": step.message, "path": [p.__dict__ for p in step.path],
            "next_conf": {**dict(params), "probe_build": step.next_build or "", "bisect_runs": runs},
            # one id per probe of this bisect: a cleared or rerun trigger finds it and starts no second chain
            "next_run_id": f"{runs[0]['run_id']}__probe{len(runs)}"}


@task.short_circuit
def more_to_probe(done: bool) -> bool:
    """Skip triggering when the bisect is done."""
    return not done
