#!/usr/bin/env bash
# The whole test suite: sets up both environments on first use, lints (ruff, rules in
# pyproject.toml), checks the pure packages' types (mypy, [tool.mypy]), then runs pytest in the
# orchestration env (tests that need mxnet run the training env's python as a subprocess). CI runs everything.
#   scripts/test.sh                 # lint + every test
#   scripts/test.sh --fast          # lint + the tests not marked slow (a few minutes)
#   scripts/test.sh tests/train -k plan   # any pytest arguments
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --tests
.venv/airflow/bin/ruff check --quiet .
.venv/airflow/bin/mypy  # the pure packages and the launcher protocols: [tool.mypy] files
if [[ ${1:-} == --fast ]]; then
  shift
  set -- -m "not slow" "$@"
fi
exec .venv/airflow/bin/python -m pytest "$@"
