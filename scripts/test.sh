#!/usr/bin/env bash
# The whole test suite: sets up both environments on first use, then runs pytest in the
# orchestration env (tests that need mxnet run the training env's python as a subprocess).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/airflow/bin/python -m pytest "$@"
