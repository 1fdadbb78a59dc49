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
   that share machines share the mapped task, and their repeats run in counterbalanced rounds (a b, b a, ...).
   A `kubernetes` run's role pods (scheduler, servers, workers) are all made by that one task,
   through a KubernetesPodOperator it builds for that run; `local` and `ssh` runs go through their
   launchers. The Airflow task timeout follows `run_timeout_minutes`; one DAG run measures at a time.
4. **parse_logs -> join_results -> report, store_results**: tidy tables, the seed-style table,
   launcher ratios, Markdown/HTML/CSV/PNG under `$MXBENCH_HOME/runs/<run id>/report/`, and every
   run in the results database (`mxbench history VARIANT`). They run even when some runs failed;
   **check_runs** then fails the DAG run so that alerting sees it.
"""
from __future__ import annotations

import pendulum
from airflow.sdk import dag

from mxbench.airflow_glue import dag_params, dag_tasks
from mxbench.matrix.params import PARAMS_SCHEMA


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # two DAG runs measuring at once would spoil each other's numbers
    doc_md=__doc__,
    params=dag_params.form_params(PARAMS_SCHEMA),
    tags=["mxbench", "benchmark"],
    # no retries of its own: a deployment sets [core] default_task_retries (a run task whose worker
    # was lost then runs again on another; a run that measured is never measured twice)
)
def mxbench_benchmark():
    tables = dag_tasks.measure()
    [dag_tasks.report(tables), dag_tasks.store_results(tables)] >> dag_tasks.check_runs()

mxbench_benchmark()
