# shellcheck shell=bash
# Source me: Airflow settings for running mxbench from this checkout (the demo, airflow standalone).
# SQLite metadata DB and logs under $MXBENCH_HOME/airflow; DAGs and plugins from the checkout.
_mxbench_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export MXBENCH_HOME=${MXBENCH_HOME:-$_mxbench_repo/.mxbench}
export AIRFLOW_HOME=${AIRFLOW_HOME:-$MXBENCH_HOME/airflow}
# DAGs and plugins folders, examples off: config/airflow-checkout.env, which the tests' stacks read too
while IFS='=' read -r _mxbench_key _mxbench_value; do
    case $_mxbench_key in
        '' | '#'*) continue ;;
        *_FOLDER) _mxbench_value=$_mxbench_repo/$_mxbench_value ;;
    esac
    export "$_mxbench_key=$_mxbench_value"
done < "$_mxbench_repo/config/airflow-checkout.env"
# a freed pool slot is seen at the scheduler's next loop: a shorter idle sleep (default 1 s) keeps
# the gap between two runs of one pool under 1 s (benchmarks/harness_overhead.py)
export AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME=${AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME:-0.5}
export PATH=$_mxbench_repo/.venv/airflow/bin:$PATH
unset _mxbench_repo _mxbench_key _mxbench_value
