"""
### mxbench_bisect: which MXNet build between a good and a bad one first got slower

Start it from the trigger form with the **variant**, the **launcher**, the **good build** (the last
known fast one) and the **bad build** (a later slow one), each as `config/mxnet-builds.json` names
it (a since date, a version, a package or a commit). The builds between them in the manifest are
bisected, **one DAG run per build measured**: the first DAG run measures the good build (the
reference); each next one measures the midpoint of the builds still in doubt, with `repeats`
runs, and judges it against the reference by the regression DAG's rule (`min_drop`). A build that
fails to measure is said so and a neighbour is measured instead; never a guess. Each DAG run
triggers the next until the first bad build is named: among 8 builds, at most 3 probes.

1. **resolve_probe** (the build from the params) -> the pipeline's **expand_variants** ->
   **prepare_data** -> **<machines>.run_variant** -> **parse_logs** -> **join_results** ->
   **store_results**;
2. **decide**: this bisect's DAG runs read back from the results store, the probe path printed,
   the next build or the answer -> **more_to_probe** -> **next_probe** (triggers the next DAG run
   with the bisect's state in its conf); **report** -> **check_runs** as in the other DAGs.
"""
from __future__ import annotations

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag

from mxbench.airflow_glue import bisect_tasks, dag_params, dag_tasks
from mxbench.airflow_glue.notify import failure_notifiers
from mxbench.matrix.params import BISECT_PARAMS_SCHEMA


@dag(
    schedule=None,  # started by a person (or the regression DAG's step finder), then by itself
    catchup=False,
    max_active_runs=1,  # the next probe waits for this one: two measuring at once would spoil both
    doc_md=__doc__,
    params=dag_params.form_params(BISECT_PARAMS_SCHEMA),
    tags=["mxbench", "regression", "bisect"],
    on_failure_callback=failure_notifiers(),
)
def mxbench_bisect():
    build = bisect_tasks.resolve_probe()
    tables = dag_tasks.measure(build)
    stored = dag_tasks.store_results(tables, build)
    decision = bisect_tasks.decide(build)
    stored >> decision
    # A next probe's run id that already exists was not made by this chain (which triggers it once):
    # fail, naming it, rather than skip and let whoever made it stop or carry on the bisect unseen.
    # No retries (whatever [core] default_task_retries says): a retry after a trigger that went through
    # would find the chain's own DAG run and fail for nothing.
    next_probe = TriggerDagRunOperator(task_id="next_probe", trigger_dag_id="mxbench_bisect",
                                       conf=decision["next_conf"], trigger_run_id=decision["next_run_id"],
                                       skip_when_already_exists=False, retries=0)
    bisect_tasks.more_to_probe(decision["done"]) >> next_probe
    decision >> dag_tasks.report(tables) >> dag_tasks.check_runs()


mxbench_bisect()
