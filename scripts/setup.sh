#!/usr/bin/env bash
# Create (or bring up to date) mxbench's two environments, idempotently:
#   .venv/train    MXNet 1.9.1 + numpy<1.24 + OpenCV: trainer, im2rec, role launcher
#   .venv/airflow  Airflow 3 + providers + pandas 3: orchestration and analysis, never imports mxnet
# A venv is rebuilt only when its requirements file changes.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${MXBENCH_PYTHON:-$(command -v python3.11 || command -v python3)}

# A bare Debian python3 lacks venv (and ensurepip) until python3-venv is installed.
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
  else
    echo "mxbench: $PYTHON has no venv module; install python3-venv" >&2; exit 1
  fi
fi

make_venv() {  # name requirements-file extra-pip-args...
  local venv=".venv/$1" reqs=$2; shift 2
  local stamp="$venv/.mxbench-stamp" want
  want=$(cat "$reqs" pyproject.toml tasks/pyproject.toml | sha256sum | cut -d' ' -f1)
  if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then return; fi
  echo "mxbench: creating $venv from $reqs" >&2
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$reqs" "$@" 2> >(grep -v '^WARNING: Location' >&2)
  echo "$want" > "$stamp"
}

make_venv train requirements-train.txt -e tasks/
make_venv airflow requirements.txt -e tasks/ -e .
