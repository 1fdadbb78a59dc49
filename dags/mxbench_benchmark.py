"""
### mxbench_benchmark: MXNet distributed-training benchmark, end to end

Reproduces the seed study (ResNet on CIFAR-10: 1, 2, 4, 8 GPUs and 2 machines x 4 GPUs with
`dist_sync`) or runs the small `cpu-demo` matrix, under each chosen launcher, `repeats` times:

1. **expand_variants**: params -> one run per (variant, launcher, repeat); a variant the target
   cannot run (more GPUs or hosts than it has) is refused here, before anything starts.
2. **prepare_data**: CIFAR-10 (or synthetic CIFAR-format data) -> RecordIO with MXNet's im2rec,
   cached.
3. **<machines>.run_variant**: one mapped task per run, in the pool of the machines it runs on
   (one slot: runs that share machines never overlap and spoil each other's numbers). Launchers
   that share machines share the mapped task, and their repeats alternate (a r1, b r1, a r2, ...).
   The task is a KubernetesPodOperator subclass: a `kubernetes` run's role pods (scheduler,
   servers, workers) are all made by that one task; `local` and `ssh` runs go through their
   launchers. The Airflow task timeout follows `run_timeout_minutes`; one DAG run measures at a time.
4. **parse_logs -> join_results -> report**: tidy tables, the seed-style table, launcher ratios,
   Markdown/HTML/CSV/PNG under `$MXBENCH_HOME/runs/<run id>/report/`. They run even when some runs
   failed; **check_runs** then fails the DAG run so that alerting sees it.
"""
from __future__ import annotations

import pendulum
# named here, though mxbench.operators imports it anyway: the dag-processor pre-imports the
# airflow.* modules a DAG file names, once, before it forks a process per parse
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator  # noqa: F401
from airflow.sdk import Param, dag, task, task_group

from mxbench.operators import RunVariantOperator
from mxbench.variants import PARAMS_SCHEMA, machine_sets


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # two DAG runs measuring at once would spoil each other's numbers
    doc_md=__doc__,
    params={name: Param(**spec) for name, spec in PARAMS_SCHEMA.items()},
    tags=["mxbench", "benchmark"],
    default_args={"retries": 0},
)
def mxbench_benchmark():
    @task
    def expand_variants(params=None, run_id=None) -> list[dict]:
        from airflow.sdk.exceptions import AirflowFailException

        from mxbench import config, connections, pipeline
        from mxbench.variants import VariantError

        targets, unavailable = pipeline.targets_for(
            params["launchers"], lambda name: connections.launcher_for(name, params))
        for reason in unavailable.values():
            print(f"mxbench: {reason}")
        try:
            return pipeline.expand(dict(params), config.dag_run_dir(run_id), targets, unavailable)
        except VariantError as exc:
            raise AirflowFailException(str(exc)) from None  # no retry can fix a misfit

    @task
    def prepare_data(params=None, run_id=None) -> dict:
        from mxbench import config, pipeline

        return pipeline.prepare_data(dict(params), config.dag_run_dir(run_id), config.data_dir())

    @task
    def pick(runs: list[dict], launchers: list[str]) -> list[dict]:
        return [run for run in runs if run["launcher"] in launchers]  # in expansion order: interleaved

    @task(trigger_rule="all_done")
    def parse_logs(params=None, run_id=None) -> dict:
        from mxbench import config, connections, pipeline

        # a run whose task died mid-run is reaped here, on its hosts too
        return pipeline.parse_all(config.dag_run_dir(run_id), lambda name: connections.launcher_for(name, params))

    @task
    def join_results(tables: dict, run_id=None) -> dict:
        from mxbench import config, pipeline

        return pipeline.join(config.dag_run_dir(run_id))

    @task
    def report(tables: dict, run_id=None) -> dict:
        from mxbench import config
        from mxbench.report import build_report

        built = build_report(config.dag_run_dir(run_id))
        print(built.pop("text"))
        print(f"report: {built['html']}")
        return built

    @task(trigger_rule="all_done")
    def check_runs(run_id=None) -> None:
        from airflow.sdk.exceptions import AirflowFailException

        from mxbench import config, pipeline

        problem = pipeline.verdict_of(config.dag_run_dir(run_id))
        if problem:
            raise AirflowFailException(problem)

    runs = expand_variants()
    data = prepare_data()
    runs >> data
    launched = []
    for machines, launchers in machine_sets().items():
        @task_group(group_id=machines)
        def launch(machines=machines, launchers=launchers):
            return RunVariantOperator.partial(
                task_id="run_variant", pool=f"mxbench_{machines}", pool_slots=1,
                map_index_template="{{ task.run['key'] }}").expand(run=pick(runs, list(launchers)))

        launched.append(launch())
    data >> launched
    parsed = parse_logs()
    launched >> parsed
    reported = report(join_results(parsed))
    reported >> check_runs()


mxbench_benchmark()
