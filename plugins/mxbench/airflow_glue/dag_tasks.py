"""The DAGs' Airflow tasks, shared by mxbench_benchmark, mxbench_regression and mxbench_bisect (whose
own tasks are in ``bisect_tasks``).

Each task wraps a stage function (``mxbench.stages.pipeline``, ``mxbench.stages.dag_run_failures``,
``mxbench.stages.regression_check``, ``mxbench.builds.mxnet_builds``, ``mxbench.store``), which need no Airflow;
their imports sit inside the tasks, so that parsing a DAG file stays fast. Each works in the DAG
run's folder as ``mxbench.artifacts`` gives it to the task: with the default artifact store, the
folder itself (``config.existing_dag_run_dir``: a DAG run begun before folders were keyed by DAG
keeps its legacy folder); with object storage (several workers, no shared disk), a scratch
folder holding what the task reads, fetched first, and what it wrote published at its end.
"""
from __future__ import annotations

from typing import ContextManager

from airflow.sdk import task, task_group

from mxbench.airflow_glue.operators import RunVariantOperator
from mxbench.matrix.variants import machine_sets
from mxbench.run_folder import DagRunFolder, RunFolder


def dag_folder(dag_run, run_id: str, task: str, **scope) -> ContextManager[DagRunFolder]:
    """The DAG run's folder for this task, built once here and handed to the stages: what it reads
    (``scope``: see ``artifacts.dag_run``) there, what it writes published when it ends."""
    from mxbench import artifacts

    return artifacts.dag_run(dag_run.dag_id, run_id, task, **scope)


RUN_FILES_READ = (RunFolder.METRICS, RunFolder.NOTICES, RunFolder.META)  # what report and store read of each run
BISECT_DAG_ID = "mxbench_bisect"  # the DAG the regression DAG starts bisects of


@task
def expand_variants(build: dict | None = None, params=None, run_id=None, dag_run=None) -> list[dict]:
    """Params -> one run per (variant, launcher, repeat); a misfit fails the DAG run here. With a
    ``build`` (the regression DAG's), every run trains with that build (its interpreter, its venv
    on each SSH host, its image in pods): a launcher with no way to run it is refused here, by
    name; one whose hosts fail to make it has its runs fail with that cause."""
    with dag_folder(dag_run, run_id, "expand_variants") as folder:
        return _expand(build, params, folder, dag_run.dag_id, dag_run.run_id)


def _expand(build, params, folder: DagRunFolder, dag_id, run_id) -> list[dict]:
    from airflow.sdk.exceptions import AirflowFailException

    from mxbench.airflow_glue import connections
    from mxbench.matrix.variants import VariantError
    from mxbench.stages import dag_run_failures, pipeline
    from mxbench_train.errors import MxbenchError
    from mxbench_train.redaction import redact

    try:  # an unmarked results connection is refused before anything runs, not after the runs
        results_url = connections.results_url(params)
    except MxbenchError as exc:
        cause = dag_run_failures.stage_failed(folder, "expand", exc)
        raise AirflowFailException(cause) from None
    targets, unavailable = pipeline.targets_for(
        params["launchers"], lambda name: connections.launcher_for(name, params))
    refused = {}
    if build and build.get("unsupported"):  # this machine cannot run it: the local runs fail with that
        unavailable["local"] = f"MXNet build {redact(build['package'])}: {redact(build['unsupported'])}"
    if build:  # each launcher gets ready to run the build (venvs on SSH hosts), or says why it cannot
        refused = pipeline.prepare_builds(params["launchers"], targets, unavailable, build,
                                          lambda name: connections.launcher_for(name, params))
    for reason in unavailable.values():
        print(f"mxbench: {reason}")
    try:
        return pipeline.expand(dict(params), folder, targets, unavailable,
                               build=build, dag_id=dag_id, run_id=run_id, refused=refused,
                               contention=pipeline.contention_thresholds(results_url))
    except VariantError as exc:
        raise AirflowFailException(str(exc)) from None  # no retry can fix a misfit


@task
def prepare_data(params=None, run_id=None, dag_run=None) -> dict:
    from mxbench import artifacts, config
    from mxbench.stages import pipeline

    with dag_folder(dag_run, run_id, "prepare_data") as folder:
        # published by another worker: fetched, so that preparing finds its cache complete
        artifacts.fetch_published_data(pipeline.prepared_name(params), config.data_dir())
        data = pipeline.prepare_data(dict(params), folder, config.data_dir())
    return artifacts.publish_data(data)  # once per data set: each run task fetches it from there


@task(task_id="pick")  # the id runs and the UI already know
def runs_for_launchers(runs: list[dict], launchers: list[str]) -> list[dict]:
    """The runs of ``launchers`` (one machine set's): the input its run task is mapped over."""
    return [run for run in runs if run["launcher"] in launchers]  # in expansion order: interleaved


def measure(build=None):
    """The measuring every mxbench DAG shares: expand_variants -> prepare_data -> each machine
    set's run tasks -> parse_logs -> join_results; the joined tables (``build``: the regression
    and bisect DAGs' MXNet build under test)."""
    runs = expand_variants(build)
    data = prepare_data()
    runs >> data
    parsed = parse_logs()
    launch_runs(runs, data) >> parsed
    return join_results(parsed)


def launch_runs(runs, data) -> list:
    """One mapped run task per machine set, in that set's pool (one slot): runs that share
    machines never overlap, and their launchers' rounds run in counterbalanced order."""
    launched = []
    for machines, launchers in machine_sets().items():
        @task_group(group_id=machines)
        def launch(machines=machines, launchers=launchers):
            return RunVariantOperator.partial(
                task_id="run_variant", pool=f"mxbench_{machines}", pool_slots=1,
                map_index_template="{{ task.run['key'] }}").expand(run=runs_for_launchers(runs, list(launchers)))

        launched.append(launch())
    data >> launched
    return launched


@task(trigger_rule="all_done")
def parse_logs(params=None, run_id=None, dag_run=None) -> dict:
    from mxbench.airflow_glue import connections
    from mxbench.stages import pipeline

    # a run whose task died mid-run is reaped here, on its hosts too
    with dag_folder(dag_run, run_id, "parse_logs", all_units=True) as folder:
        return pipeline.parse_all(folder, lambda name: connections.launcher_for(name, params))


@task
def join_results(tables: dict, params=None, run_id=None, dag_run=None) -> dict:
    from mxbench.airflow_glue import connections
    from mxbench.stages import pipeline

    with dag_folder(dag_run, run_id, "join_results", tables=True, all_units=True,
                    unit_files=(RunFolder.METRICS,)) as folder:
        return pipeline.join(folder, pipeline.stored_aa_noise(folder, connections.results_url(params)))


@task
def store_results(tables: dict, build: dict | None = None, params=None, dag_run=None, run_id=None) -> dict:
    """This DAG run's runs into the results database, replacing what an earlier try wrote."""
    with dag_folder(dag_run, run_id, "store_results", tables=True, all_units=True,
                    unit_files=RUN_FILES_READ) as folder:
        return _store(folder, build, params, dag_run, run_id)


def _store(folder: DagRunFolder, build, params, dag_run, run_id) -> dict:
    from mxbench import artifacts, store
    from mxbench.airflow_glue import connections
    from mxbench.run_folder import write_json

    try:
        url = connections.results_url(params)
        with store.errors_without_password(url):  # a driver's message may quote the URL
            store.migrate(url)
            stored = store.record_dag_run(
                url, folder, dag_id=dag_run.dag_id, run_id=run_id, trigger=trigger_of(dag_run), build=build,
                folder=artifacts.published_folder(dag_run.dag_id, run_id), logical_date=dag_run.logical_date,
                data_interval=(dag_run.data_interval_start, dag_run.data_interval_end))
    except Exception as exc:  # check_runs fails the DAG run with it; the run folder keeps every result
        write_json(folder.stored, {"error": f"{type(exc).__name__}: {exc}"})
        raise
    write_json(folder.stored, stored)
    print(f"mxbench: stored {stored['repeats']} repeat(s) of {run_id} in the results database "
          f"(hardware {stored['fingerprint']})")
    return stored


def trigger_of(dag_run) -> str:
    """manual | scheduled | backfill, as the results database records it."""
    kind = str(getattr(dag_run.run_type, "value", dag_run.run_type))
    return {"scheduled": "scheduled", "backfill": "backfill"}.get(kind, "manual")


@task(trigger_rule="all_done")  # a report of what there is, whatever failed before it
def report(tables: dict, params=None, run_id=None, dag_run=None) -> dict:
    """The report; its "Since last time" reads the results store now (``stages.since_last``), and says
    why where it cannot."""
    from mxbench import artifacts
    from mxbench.airflow_glue import connections
    from mxbench.report import build_report
    from mxbench.stages.since_last import since_last

    with dag_folder(dag_run, run_id, "report", tables=True, all_units=True, unit_files=RUN_FILES_READ) as folder:
        try:
            url, unreadable = connections.results_url(params), None
        except Exception as exc:  # an unmarked or missing connection: the report stands without the store
            url, unreadable = "", f"the results connection could not be read ({type(exc).__name__}: {exc})"
        since_last(folder, url, dag_run.dag_id, run_id, unreadable=unreadable)
        built = build_report(folder)
        print(built.pop("text"))
        built = artifacts.published_paths(built, folder, dag_run.dag_id, run_id)
    print(f"report: {built['html']}")
    return built


@task(trigger_rule="all_done")
def check_runs(run_id=None, dag_run=None) -> None:
    """Fail the DAG run when a run measured nothing (or a regression was found), so that
    Airflow's callbacks and alerting see it; after the report, which is built either way."""
    from airflow.sdk.exceptions import AirflowFailException

    from mxbench.stages import dag_run_failures

    report = (DagRunFolder.REPORT_MARKDOWN,)
    with dag_folder(dag_run, run_id, "check_runs", tables=True, report_files=report) as folder:
        problem = dag_run_failures.failure_message(folder)
    if problem:
        raise AirflowFailException(problem)


# --- the regression DAG's own tasks ----------------------------------------------------------

@task
def resolve_build(params=None, dag_run=None) -> dict:
    """The MXNet build this DAG run measures: the versions manifest's entry for its data interval
    (the same interval always measures the same build), its install spec (what SSH hosts install),
    and, when the local launcher runs, its training interpreter on this machine, made on first
    use. A build that cannot be installed or trained here is named (``unsupported``); the local
    runs then fail with that cause, never as a crash; the other launchers run it where they run."""
    import dataclasses

    from mxbench.builds import mxnet_builds
    from mxbench.builds.record import RunBuild
    from mxbench_train.errors import MxbenchError
    from mxbench_train.redaction import redact

    when = dag_run.data_interval_start or dag_run.logical_date or dag_run.run_after
    entry = mxnet_builds.build_for(when)
    build = RunBuild.of(entry, mxnet_builds.install_spec(entry))
    if "local" not in (params or {}).get("launchers", ["local"]):
        print(f"mxbench: interval from {when} measures {redact(build.package)} (no local runs: no venv here)")
        return build.to_dict()
    try:
        python = mxnet_builds.ensure_venv(entry)
    except MxbenchError as exc:
        return dataclasses.replace(build, unsupported=redact(str(exc))).to_dict()
    build = dataclasses.replace(build, python=python, unsupported=mxnet_builds.check_trainer(python))
    print(f"mxbench: interval from {when} measures {redact(build.package)}: "
          f"{redact(build.unsupported or build.python)}")
    return build.to_dict()


@task
def check_regression(stored: dict, params=None, run_id=None, dag_run=None) -> list:
    """Each variant against its baseline (the last DAG runs on the same hardware): findings for the
    report; ``check_runs`` fails the DAG run on a regression."""
    from mxbench import store
    from mxbench.airflow_glue import connections
    from mxbench.stages import regression_check

    url = connections.results_url(params)
    with dag_folder(dag_run, run_id, "check_regression", tables=True) as folder, \
            store.errors_without_password(url):  # a driver's message may quote the URL
        findings = regression_check.check_regressions(folder, url, dag_run.dag_id, run_id, stored["fingerprints"],
                                                      params["baseline_runs"], params["min_drop"])
    for finding in findings:
        print(f"mxbench: {finding['message']}")
    return findings


@task
def bisects_to_start(findings: list, build: dict, params=None, run_id=None, dag_run=None) -> list[dict]:
    """The mxbench_bisect DAG runs to start for this DAG run's regressions (``bisect.regression_bisects``;
    not those triaged as acknowledged or expected), each ``conf`` with this DAG run's measuring params
    and the id of a chain minted for it in the results store (``store.bisect_chains``), so that its
    first DAG run proves it is this one's. A range a scheduled or backfill DAG run of this DAG
    (not one with a trigger user's conf: ``store.starter_kind``) already bisects, or bisected to an
    answer, is not started again: a regression that lasts many nights starts one bisect of that
    range, not one a night (a chain whose first DAG run never began, or that ended without an
    answer, does not count). A retry of this task starts its own chains
    again, under the same run ids, which have a part nobody can guess. None when ``bisect`` is off."""
    from mxbench import store
    from mxbench.airflow_glue import connections
    from mxbench.builds import mxnet_builds
    from mxbench.matrix.params import BISECT_PARAMS_SCHEMA, bisect_chain_params
    from mxbench.regression import bisect

    if not params.get("bisect"):
        return []
    untriaged = [f for f in findings if not f.get("triage")]
    confs = bisect.regression_bisects(untriaged, build.get("package"), mxnet_builds.load_manifest())
    shared = {name: value for name, value in params.items()
              if name in BISECT_PARAMS_SCHEMA and name not in ("only_variants", "launchers", "good_build",
                                                               "bad_build", "probe_build", "bisect_runs",
                                                               "bisect_chain")}
    url, starts = connections.results_url(params), []
    kind = store.starter_kind(dag_run.run_type, dag_run.conf)
    for conf in confs:
        conf = {**shared, **conf}
        described = (f"mxbench_bisect of {conf['only_variants'][0]} ({conf['launchers'][0]}) from "
                     f"{conf['good_build']} to {conf['bad_build']}")
        with store.errors_without_password(url):
            earlier = store.chains_over(url, BISECT_DAG_ID, dag_run.dag_id, conf["only_variants"][0],
                                        conf["launchers"][0], conf["good_build"], conf["bad_build"])
            # a retry of this task; not a chain of a DAG run its reprocessing backfill gave another conf
            mine = next((c for c in earlier if c["starter_run"] == run_id and c["starter_kind"] == kind), None)
            # only the nightly's own chains stand for a range: a manual DAG run's settings, or a
            # backfill's conf, are its trigger user's
            if mine is None and any(store.blocks_range(c) for c in earlier):
                print(f"mxbench: {described}: started before by {dag_run.dag_id}, not again")
                continue
            chain = mine or store.chain(url, store.start_chain(
                url, dag_id=BISECT_DAG_ID, starter=(dag_run.dag_id, run_id), starter_kind=kind,
                variant=conf["only_variants"][0], launcher=conf["launchers"][0], good_build=conf["good_build"],
                bad_build=conf["bad_build"], first_params=bisect_chain_params(conf)))
        print(f"mxbench: starting {described}")
        starts.append({"conf": {**conf, "bisect_chain": chain["chain_id"]},
                       "trigger_run_id": store.run_id_for(chain, bisect.run_id_of(conf), 0)})
    return starts

