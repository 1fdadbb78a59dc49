"""
### mxbench_benchmark: MXNet distributed-training benchmark, end to end

Reproduces the seed study (ResNet on CIFAR-10: 1, 2, 4, 8 GPUs and 2 machines x 4 GPUs with
`dist_sync`) or runs the small `cpu-demo` matrix, under each chosen launcher, `repeats` times:

1. **expand_variants**: params -> one run per (variant, launcher, repeat); a variant the target
   cannot run (more GPUs or hosts than it has) is refused here, before anything starts.
2. **prepare_data**: CIFAR-10 (or synthetic CIFAR-format data) -> RecordIO with MXNet's im2rec,
   cached.
3. **<launcher>.run_variant**: one mapped task per run, in the launcher's pool (one slot: runs
   that share a target never overlap and spoil each other's numbers).
4. **parse_logs -> join_results -> report**: tidy tables, the seed-style table, launcher ratios,
   Markdown/HTML/CSV/PNG under `$MXBENCH_HOME/runs/<run id>/report/`. They run even when some runs
   failed; **check_runs** then fails the DAG run so that alerting sees it.
"""
from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, task, task_group

from mxbench.variants import LAUNCHERS, PARAMS_SCHEMA


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    doc_md=__doc__,
    params={name: Param(**spec) for name, spec in PARAMS_SCHEMA.items()},
    tags=["mxbench", "benchmark"],
    default_args={"retries": 0},
)
def mxbench_benchmark():
    @task
    def expand_variants(params=None, run_id=None) -> list[dict]:
        from airflow.sdk.exceptions import AirflowFailException

        from mxbench import config, pipeline
        from mxbench.variants import VariantError

        targets = pipeline.targets_for(params["launchers"])
        try:
            return pipeline.expand(dict(params), config.dag_run_dir(run_id), targets)
        except VariantError as exc:
            raise AirflowFailException(str(exc)) from None  # no retry can fix a misfit

    @task
    def prepare_data(params=None, run_id=None) -> dict:
        from mxbench import config, pipeline

        return pipeline.prepare_data(dict(params), config.dag_run_dir(run_id), config.data_dir())

    @task
    def pick(runs: list[dict], launcher: str) -> list[dict]:
        return [run for run in runs if run["launcher"] == launcher]

    @task(map_index_template="{{ task.op_kwargs['run']['key'] }}")
    def run_variant(run: dict, data: dict, params=None, run_id=None) -> dict:
        from mxbench import config, pipeline

        result = pipeline.run_one(run, config.dag_run_dir(run_id), data,
                                  deadline_s=60 * params["run_timeout_minutes"])
        print(f"mxbench: run {run['key']}: {result['status']} in {result['duration_s']:.1f} s")
        return result

    @task(trigger_rule="all_done")
    def parse_logs(run_id=None) -> dict:
        from mxbench import config, pipeline

        return pipeline.parse_all(config.dag_run_dir(run_id))

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

        dag_dir = config.dag_run_dir(run_id)
        if not (dag_dir / "report" / "report.md").is_file():
            raise AirflowFailException(f"no report was built in {dag_dir}: see parse_logs, join_results, report")
        failed = pipeline.failures(dag_dir)
        if failed:
            lines = "\n".join(f"{f['key']}: {f['status']}: {f['cause']}" for f in failed)
            raise AirflowFailException(f"{len(failed)} run(s) without a result:\n{lines}")

    runs = expand_variants()
    data = prepare_data()
    runs >> data
    launched = []
    for launcher in LAUNCHERS:
        @task_group(group_id=launcher)
        def launch(launcher=launcher):
            return run_variant.override(pool=f"mxbench_{launcher}", pool_slots=1).partial(data=data).expand(
                run=pick(runs, launcher))

        launched.append(launch())
    parsed = parse_logs()
    launched >> parsed
    reported = report(join_results(parsed))
    reported >> check_runs()


mxbench_benchmark()
