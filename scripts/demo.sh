#!/usr/bin/env bash
# The main job: set up everything on first use, then run the benchmark DAG once, the cpu-demo
# matrix on the local launcher with synthetic CIFAR-format data, and say where the report is.
#   scripts/demo.sh                                    # cpu-demo, 3 repeats (one launcher: no verdict to give)
#   scripts/demo.sh '{"dataset": "/data/cifar-10-python.tar.gz"}'   # any trigger-form params
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/airflow-env.sh
mkdir -p "$MXBENCH_HOME"
log=$MXBENCH_HOME/demo.log
echo "mxbench: Airflow metadata DB and pools (log: $log)"
scripts/airflow-init.sh >"$log" 2>&1
conf=${1:-'{"preset": "cpu-demo", "launchers": ["local"], "repeats": 3}'}
echo "mxbench: airflow dags test mxbench_benchmark -c '$conf'"
airflow dags test mxbench_benchmark -c "$conf" 2>&1 | tee -a "$log" \
  | grep --line-buffered -oE "mxbench: run .*|RunFailed: .*" || true
finished=$(grep -oE "DagRun Finished: .*run_duration=[0-9.]+, state=[a-z]+" "$log" | tail -1)
run_id=$(grep -oE "run_id=[^,]+" <<<"$finished" | cut -d= -f2-)
state=$(grep -oE "state=[a-z]+$" <<<"$finished" | cut -d= -f2)
echo "mxbench: DAG run ${run_id:-?} finished: ${state:-unknown}"
if [[ -n $run_id ]]; then
  report=$(python -c 'import sys; from mxbench import config; print(config.dag_run_dir(sys.argv[1]) / "report")' "$run_id")
  if [[ -f $report/report.md ]]; then
    sed -n '/^## Results/,/^## /p' "$report/report.md" | head -n -1
    echo "mxbench: report: $report/report.html (also report.md, CSV tables and PNG plots there)"
  fi
fi
if [[ $state != success ]]; then
  echo "mxbench: the DAG run did not succeed; see $log" >&2
  exit 1
fi
