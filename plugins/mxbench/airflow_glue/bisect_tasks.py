"""The bisect DAG's own tasks (mxbench_bisect); the measuring ones are the pipeline's (``dag_tasks``).

One DAG run measures one build: the good build first (the reference), then each probe that
``mxbench.regression.bisect`` picks. ``resolve_probe`` takes the build from the params (not from the date),
``decide`` reads this bisect's DAG runs back from the results store, judges each probe against
the reference by the regression rule and picks the next build or names the first bad one, and
``next_probe`` triggers the next DAG run with the bisect's state in its conf (``bisect_runs``:
each earlier DAG run and the build it measured; ``probe_build``: what it measures; ``bisect_chain``:
the chain's id). The results store keeps each chain (``mxbench.store.bisect_chains``): a DAG run
that claims one with params the chain did not hand on is refused before it measures, and the next
probe's run id has a random part, so nobody can make it first.
"""
from __future__ import annotations

from airflow.sdk import task


def _plan(params) -> tuple:
    """The builds from good to bad (manifest entries), the one this DAG run measures, and its label."""
    from mxbench.builds import mxnet_builds
    from mxbench.regression import bisect

    chosen = bisect.builds_between(params["good_build"], params["bad_build"], mxnet_builds.load_manifest())
    labels = [bisect.label(b) for b in chosen]
    probe = params.get("probe_build") or labels[0]  # the first DAG run measures the reference
    if probe not in labels:
        raise ValueError(f"probe_build {probe!r} is not one of the builds from {labels[0]} to {labels[-1]}: {labels}")
    for earlier in params.get("bisect_runs") or []:
        if earlier["build"] not in labels:
            raise ValueError(f"bisect_runs names {earlier['build']!r}, not one of {labels}")
    return chosen, labels, chosen[labels.index(probe)], probe


@task
def resolve_probe(params=None, run_id=None, dag_run=None) -> dict:
    """The build this DAG run measures, as ``dag_tasks.resolve_build`` gives a date's: its record
    (package, commit, image, install spec, local interpreter or why it cannot run here) and its
    bisect ``label``. A bad good/bad pair, or a claim on a chain that did not hand this DAG run
    its params (``store.claim``), fails the DAG run here, naming the cause."""
    import dataclasses

    from airflow.sdk.exceptions import AirflowFailException

    from mxbench import store
    from mxbench.airflow_glue import connections
    from mxbench.builds import mxnet_builds
    from mxbench.builds.record import RunBuild
    from mxbench.matrix.params import bisect_chain_params
    from mxbench_train.errors import MxbenchError
    from mxbench_train.redaction import redact

    try:
        _, labels, entry, probe = _plan(params)
        url = connections.results_url(params)
        with store.errors_without_password(url):
            store.claim(url, dag_run.dag_id, run_id, params.get("bisect_chain", ""), bisect_chain_params(params))
    except (ValueError, MxbenchError, store.StoreError) as exc:
        raise AirflowFailException(redact(f"bisect from {params['good_build']!r} to {params['bad_build']!r}: "
                                          f"{exc}")) from None
    build = RunBuild.of(entry, label=probe)
    try:
        build = dataclasses.replace(build, spec=tuple(mxnet_builds.install_spec(entry)))
        if "local" in params["launchers"]:
            python = mxnet_builds.ensure_venv(entry)
            build = dataclasses.replace(build, python=python, unsupported=mxnet_builds.check_trainer(python))
    except MxbenchError as exc:  # the local runs fail with this cause; decide probes a neighbour
        build = dataclasses.replace(build, unsupported=redact(str(exc)))
    print(f"mxbench: bisect {labels[0]} .. {labels[-1]}: this DAG run measures {probe} "
          f"({redact(build.package)}): {redact(build.unsupported or build.python or 'no local runs')}")
    return build.to_dict()


@task(trigger_rule="all_done", multiple_outputs=True)  # a probe whose runs failed is still decided on
def decide(build: dict, params=None, run_id=None, dag_run=None) -> dict:
    """This bisect's DAG runs so far, judged; the next build to probe or the first bad build. The
    chain moves on to the next DAG run's params in the results store (``store.advance_chain``)."""
    from airflow.sdk.exceptions import AirflowFailException

    from mxbench import store
    from mxbench.airflow_glue import connections
    from mxbench.airflow_glue.dag_tasks import dag_folder
    from mxbench.matrix.params import bisect_chain_params
    from mxbench.regression import bisect
    from mxbench.run_folder import write_json

    _, labels, _, probe = _plan(params)
    runs = list(params.get("bisect_runs") or []) + [{"build": probe, "run_id": run_id}]
    variant, launcher = params["only_variants"][0], params["launchers"][0]
    url = connections.results_url(params)
    try:
        with store.errors_without_password(url):
            chain = store.claim(url, dag_run.dag_id, run_id, params.get("bisect_chain", ""),
                                bisect_chain_params(params))
    except store.ChainRefused as exc:
        raise AirflowFailException(str(exc)) from None
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
    next_params = {**bisect_chain_params(params), "probe_build": step.next_build or "", "bisect_runs": runs}
    with store.errors_without_password(url):
        moved = store.advance_chain(url, chain["chain_id"], run_id, bisect_chain_params(params),
                                    None if step.done else next_params, answered=bool(step.done and step.first_bad))
    if not moved:  # a DAG run with the same params decided first: one chain never forks
        raise AirflowFailException(f"bisect chain {chain['chain_id']}: another DAG run with these params decided "
                                   "this step first; this one hands nothing on")
    print(f"mxbench: {title}, probe path:")
    for line in bisect.path_lines(step):
        print(f"  {line}")
    with dag_folder(dag_run, run_id, "decide", tables=True) as folder:  # for the report
        write_json(folder.bisect, {"title": title, "path": bisect.path_lines(step)})
    return {"done": step.done, "first_bad": step.first_bad, "candidates": step.candidates,
            "message": step.message, "path": [p.__dict__ for p in step.path],
            "next_conf": {**next_params, "bisect_chain": chain["chain_id"]},
            # unguessable, and the same on a retry of this decide; were it made first, the trigger fails
            "next_run_id": store.run_id_for(chain, f"{runs[0]['run_id']}__probe{len(runs)}", len(runs))}


@task.short_circuit
def more_to_probe(done: bool) -> bool:
    """Skip triggering when the bisect is done."""
    return not done
