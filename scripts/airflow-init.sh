#!/usr/bin/env bash
# Make a new Airflow home ready for mxbench, idempotently, in the order Airflow needs:
# the metadata DB first (nothing else works before it), then one pool per machine set.
# Run after `source scripts/airflow-env.sh` (or with your own AIRFLOW_HOME and airflow on PATH).
set -euo pipefail
airflow db migrate
# airflow's own interpreter: the one that has mxbench installed beside it
"$(dirname "$(command -v airflow)")/python" - <<'PY' | while IFS=$'\t' read -r pool description; do airflow pools set "$pool" 1 "$description"; done
from mxbench.matrix.variants import machine_sets  # MXBENCH_MACHINE_SETS, as the DAG reads it

for machines, launchers in machine_sets().items():
    print(f"mxbench_{machines}\tmxbench: one run at a time on the {machines} machines ({', '.join(launchers)})")
PY
