#!/usr/bin/env bash
# The whole test suite: sets up both environments on first use, lints (ruff, rules in
# pyproject.toml), checks the pure packages' types (mypy, [tool.mypy]), then runs pytest in the
# orchestration env (tests that need mxnet run the training env's python as a subprocess). Between them it
# builds the docs site (mkdocs.yml) with --strict, so a broken link or anchor fails the run; it builds into a
# temporary folder, leaving nothing in the tree. The tests run in two steps: first every test not
# marked `alone`, in one more process than this machine has cores (pytest-xdist; each test file in one
# process, so its module fixtures start once), then the `alone` ones by themselves (they read the
# machine's other processes or its timing). Each step prints its 25 slowest tests (pyproject.toml
# addopts). CI runs everything.
#   scripts/test.sh                 # lint + every test
#   scripts/test.sh --fast          # lint + the tests not marked slow (a few minutes)
#   scripts/test.sh tests/train -k plan   # any pytest arguments: one pytest process, as given
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --tests
.venv/airflow/bin/ruff check --quiet .
.venv/airflow/bin/mypy  # the pure packages and the launcher protocols: [tool.mypy] files
site=$(mktemp -d)
.venv/airflow/bin/mkdocs build --strict --site-dir "$site"
rm -rf "$site"
pytest=(.venv/airflow/bin/python -m pytest)
fast=""
if [[ ${1:-} == --fast ]]; then
  shift
  fast="not slow and "
fi
if [[ $# -gt 0 ]]; then
  exec "${pytest[@]}" ${fast:+-m "not slow"} "$@"
fi
# the MXNet build venvs every process of this run shares (tests/conftest.py), gone with the run
export MXBENCH_TEST_CACHE
MXBENCH_TEST_CACHE=$(mktemp -d /tmp/mxbench-test-cache-XXXXXX)
trap 'rm -rf "$MXBENCH_TEST_CACHE"' EXIT
parallel=0 alone=0
# --no-loadscope-reorder: the files start in collection order, tests/dags (the longest) first, rather than the
# files with the most tests first, which left the longest DAG-run files to end the run alone.
# MXBENCH_LOCAL_CORES=1 and OMP_WAIT_POLICY=passive: with more processes than cores, each trainer's OpenMP
# threads on every core, spinning while they wait, crowd out the others' training (three tiny trainings at
# once: 34 s; 27 s with passive threads; 13 s with one thread each).
MXBENCH_LOCAL_CORES=1 OMP_WAIT_POLICY=passive "${pytest[@]}" -n "$(( $(nproc) + 1 ))" --dist loadfile --no-loadscope-reorder \
  -m "${fast}not alone" || parallel=$?
# 0 passed, 1 some failed: go on to the alone tests; anything else (interrupted, a usage or internal error) ends here
(( parallel <= 1 )) || exit "$parallel"
"${pytest[@]}" -m "${fast}alone" || alone=$?
(( alone == 5 )) && alone=0  # 5: no test of this selection (pytest's "no tests collected")
exit $(( parallel ? parallel : alone ))
