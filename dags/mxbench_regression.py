"""
### mxbench_regression: a nightly throughput check, and backfills over MXNet builds

Runs a small matrix every day (`@daily`) and compares each variant with its **baseline**: the
last `baseline_runs` successful DAG runs of the same variant and launcher on the same hardware
fingerprint, in the results database. A drop is called a regression only when the permutation
test over the repeats and the bootstrap interval agree and it is at least `min_drop`; noise alone
does not alert, and too little history is "no baseline yet". On a regression the DAG run fails
(Airflow's callbacks and alerting fire) and the report names the variant, the baseline, the
current value, the change with its interval, both MXNet builds and the runs; the notifiers that
`MXBENCH_NOTIFIERS` names (e-mail, Slack: Airflow notifiers) hear of it.

Each data interval measures the MXNet build that `config/mxnet-builds.json` gives its start date
(the same interval always measures the same build), in a training environment made for that build
on first use. So a backfill measures a range of builds:

    airflow backfill create --dag-id mxbench_regression --from-date 2026-11-01 --to-date 2026-11-10

1. **resolve_build** -> **expand_variants** -> **prepare_data** -> **<machines>.run_variant** ->
   **parse_logs** -> **join_results**, as in mxbench_benchmark;
2. **store_results** -> **check_regression** (`tables/regression.csv`, and the history of these
   variants with each DAG run judged) -> **report** (with the history plot and the step finder:
   where the level changed over the whole history, and the first build after it) -> **check_runs**
   (fails on a failed run or a regression nobody acknowledged);
3. **bisects_to_start** -> **start_bisect**: a regression between two builds of the manifest with
   builds between them starts `mxbench_bisect` over them (param `bisect`).

Before alerting: the rounds beyond `repeats` (`confirm_rounds`) run only for a variant whose first
rounds look like a regression (their median at least half of `min_drop` below the baseline's), and
the rule then judges every round; across the variants and launchers of one DAG run, a regression
stands only where its Benjamini–Hochberg q is below 0.05. The report gives the false alerts to
expect per month from the A/A noise floor. Alerts are triaged on the Benchmark history page:
acknowledged or expected ones no longer fail later DAG runs, and a distribution change restarts the
baseline.
"""
from __future__ import annotations

import pendulum
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag

from mxbench.airflow_glue import dag_params, dag_tasks
from mxbench.airflow_glue.notify import failure_notifiers
from mxbench.matrix.params import REGRESSION_PARAMS_SCHEMA


@dag(
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,  # the past is measured on purpose, with airflow backfill create
    max_active_runs=1,  # two DAG runs measuring at once would spoil each other's numbers
    doc_md=__doc__,
    params=dag_params.form_params(REGRESSION_PARAMS_SCHEMA),
    tags=["mxbench", "regression"],
    # no retries of its own: a deployment sets [core] default_task_retries (a run task whose worker
    # was lost then runs again on another; a run that measured is never measured twice)
    on_failure_callback=failure_notifiers(),  # configuration: MXBENCH_NOTIFIERS (mxbench.airflow_glue.notify)
)
def mxbench_regression():
    build = dag_tasks.resolve_build()
    tables = dag_tasks.measure(build)
    findings = dag_tasks.check_regression(dag_tasks.store_results(tables, build))
    dag_tasks.report(findings) >> dag_tasks.check_runs()
    # no bisect to start: zero mapped instances, skipped (a range started before is not among them).
    # A run id made first by someone else fails the trigger, saying so, rather than skip it unseen.
    TriggerDagRunOperator.partial(task_id="start_bisect", trigger_dag_id=dag_tasks.BISECT_DAG_ID,
                                  skip_when_already_exists=False, retries=0).expand_kwargs(
        dag_tasks.bisects_to_start(findings, build))


mxbench_regression()
