#!/usr/bin/env bash
# The whole test suite: sets up both environments on first use, lints (ruff, rules in
# pyproject.toml), checks the pure packages' types (mypy, [tool.mypy]), then runs pytest in the
# orchestration env (tests that need mxnet run the training env's python as a subprocess). Between them it
# builds the docs site (mkdocs.yml) with --strict, so a broken link or anchor fails the run; it builds into a
# temporary folder, leaving nothing in the tree. pytest prints the 25 slowest tests of every run
# (pyproject.toml addopts). CI runs everything.
#   scripts/test.sh                 # lint + every test
#   scripts/test.sh --fast          # lint + the tests not marked slow (a few minutes)
#   scripts/test.sh tests/train -k plan   # any pytest arguments
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --tests
.venv/airflow/bin/ruff check --quiet .
.venv/airflow/bin/mypy  # the pure packages and the launcher protocols: [tool.mypy] files
site=$(mktemp -d)
.venv/airflow/bin/mkdocs build --strict --site-dir "$site"
rm -rf "$site"
if [[ ${1:-} == --fast ]]; then
  shift
  set -- -m "not slow" "$@"
fi
exec .venv/airflow/bin/python -m pytest "$@"
