#!/usr/bin/env bash
# Create (or bring up to date) mxbench's two environments, idempotently:
#   .venv/train    MXNet 1.9.1 + numpy<1.24 + OpenCV: trainer, im2rec, role launcher
#   .venv/airflow  Airflow 3 + providers + pandas 3: orchestration and analysis, never imports mxnet
# and, as root on Debian, openssh-server (the demo's and the tests' ssh hosts), iproute2 (their
# network namespaces) and the runtimes MXNet links (libgomp1, libquadmath0) where missing.
# A venv is rebuilt only when its requirements file (or one it includes with -r) changes.
# .venv/airflow gets requirements-dev.txt: the runtime pins of requirements.txt (what the Airflow
# image installs) plus the tests' and linters' tools. uv (pinned, in .venv/uv) installs them.
#   scripts/setup.sh           what the demo uses
#   scripts/setup.sh --tests   also what only the tests use (scripts/test.sh): postgresql, chromium
#                              and chromium-driver, redis-server, and .venv/s3
set -euo pipefail
cd "$(dirname "$0")/.."
for_tests=
case ${1:-} in
  --tests) for_tests=1 ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac
PYTHON=${MXBENCH_PYTHON:-$(command -v python3.11 || command -v python3)}

# A bare Debian python3 lacks venv (and ensurepip) until python3-venv is installed.
if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
  else
    echo "mxbench: $PYTHON has no venv module; install python3-venv" >&2; exit 1
  fi
fi

# apt-get install as root, quietly, starting no service the packages bring (policy-rc.d says no)
install_debs() {
  [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null || return 1
  (
    made_policy=
    trap '[[ -z $made_policy ]] || rm -f /usr/sbin/policy-rc.d' EXIT
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
      made_policy=1
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    fi
    export DEBIAN_FRONTEND=noninteractive
    # no Recommends: they pull in systemd on a bare machine
    apt-get update -qq && apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confold "$@" >/dev/null
  )
}

# The SSH launcher's tests and demo run real sshd on loopback addresses (standins.sshd).
# Never let the package start (or later boot) a system sshd on port 22: besides policy-rc.d,
# Debian's ssh.service/ssh.socket/init script all honour /etc/ssh/sshd_not_to_be_run.
if [[ ! -x /usr/sbin/sshd ]] || ! command -v ssh-keygen >/dev/null; then
  if [[ ! -x /usr/sbin/sshd ]] && [[ $(id -u) == 0 ]]; then mkdir -p /etc/ssh && touch /etc/ssh/sshd_not_to_be_run; fi
  echo "mxbench: installing openssh-server for the loopback ssh hosts (no system sshd is started)" >&2
  install_debs openssh-server openssh-client \
    || echo "mxbench: could not install openssh-server: the ssh tests fail and the demo skips its ssh leg, saying why" >&2
fi

# The demo's and the tests' SSH hosts are network namespaces joined by a shaped link
# (standins.netns): ip and tc (iproute2), nsenter (util-linux, in every Debian). Without them the
# demo falls back to loopback hosts and says so; the namespace tests fail.
if ! command -v ip >/dev/null || ! command -v tc >/dev/null || ! command -v nsenter >/dev/null; then
  echo "mxbench: installing iproute2 and util-linux for the SSH hosts' network namespaces" >&2
  install_debs iproute2 util-linux \
    || echo "mxbench: could not install iproute2: the SSH hosts fall back to loopback addresses" >&2
fi

# MXNet's wheel links the system's OpenMP and quad-math runtimes (libmxnet.so: libgomp.so.1,
# libquadmath.so.0), which a bare Debian lacks until a compiler brings them.
shared_libs=$(/sbin/ldconfig -p 2>/dev/null || true)
if [[ -n $shared_libs ]] && { ! grep -q 'libgomp\.so\.1 ' <<<"$shared_libs" || ! grep -q 'libquadmath\.so\.0 ' <<<"$shared_libs"; }; then
  echo "mxbench: installing libgomp1 and libquadmath0, which MXNet links" >&2
  install_debs libgomp1 libquadmath0 || echo "mxbench: could not install libgomp1 and libquadmath0: MXNet will not load" >&2
fi

# uv installs a venv's requirements in seconds where pip takes a minute and a half on 2 cores (both
# take the newest versions the pins allow). A pinned tool in a venv of its own, .venv/uv. uv reads
# its own index settings (UV_INDEX_URL, ...), not pip's: where packages come only through pip's
# configuration, or uv cannot be had or fails, pip does the work; MXBENCH_USE_UV=0 always gives pip.
UV_VERSION=0.13.8
uv= uv_missing=
[[ ${MXBENCH_USE_UV:-1} != 0 ]] || uv_missing="MXBENCH_USE_UV=0"
find_uv() {  # sets uv, installing it on first use; fails (saying why, once) when it cannot be had
  [[ -z $uv_missing ]] || return 1
  [[ -z $uv ]] || return 0
  if [[ $(.venv/uv/bin/uv --version 2>/dev/null) != "uv $UV_VERSION"* ]]; then
    rm -rf .venv/uv
    if ! { "$PYTHON" -m venv .venv/uv && .venv/uv/bin/pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"; } >/dev/null 2>&1; then
      rm -rf .venv/uv
      uv_missing="pip could not install uv==$UV_VERSION"
      echo "mxbench: $uv_missing; pip installs the venvs (slower)" >&2
      return 1
    fi
  fi
  uv=.venv/uv/bin/uv
}

make_venv() {  # name requirements-file extra-install-args...
  local venv=".venv/$1" reqs=$2; shift 2
  local stamp="$venv/.mxbench-stamp" want
  # the files it includes with -r count too (paths relative to the repository root, where they all are)
  want=$(cat "$reqs" $(sed -n 's/^-r[[:space:]]*//p' "$reqs") pyproject.toml tasks/pyproject.toml | sha256sum | cut -d' ' -f1)
  if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then return; fi
  echo "mxbench: creating $venv from $reqs" >&2
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  if ! find_uv || ! "$uv" pip install --quiet --python "$venv/bin/python" -r "$reqs" "$@"; then
    [[ -n $uv_missing ]] || echo "mxbench: uv could not install $reqs; pip tries" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-compile -r "$reqs" "$@" \
      2> >(grep -v '^WARNING: Location' >&2)
  fi
  # byte-compiled on every core (uv compiles nothing; pip, one file at a time, took a minute of the
  # demo's set-up on 2 cores). As under pip, a file that is not Python 3 (some packages ship such
  # test data) stays uncompiled, so compileall's status says nothing.
  "$venv/bin/python" -m compileall -q -j 0 "$venv/lib" >/dev/null 2>&1 || true
  echo "$want" > "$stamp"
}

make_venv train requirements-train.txt -e tasks/
make_venv airflow requirements-dev.txt -e tasks/ -e .
[[ -n $for_tests ]] || exit 0

# What follows only the tests use.

# The results store's tests run a real PostgreSQL server of their own (initdb/pg_ctl in a temp
# folder): the server binaries only, with no "main" cluster created and none started.
if ! command -v initdb >/dev/null && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  if [[ $(id -u) == 0 ]]; then
    mkdir -p /etc/postgresql-common
    [[ -e /etc/postgresql-common/createcluster.conf ]] || echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf
  fi
  echo "mxbench: installing postgresql for the results store's tests (no cluster is created or started)" >&2
  install_debs postgresql || echo "mxbench: could not install postgresql: the store's PostgreSQL tests fail, saying why" >&2
fi

# The UI tests drive Debian's headless Chromium through its matching chromedriver (Selenium).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  echo "mxbench: installing chromium and chromium-driver for the browser tests" >&2
  install_debs chromium chromium-driver || echo "mxbench: could not install chromium: the browser tests fail, saying why" >&2
fi

# The report's accessibility test runs axe-core (Deque's checker, the script itself, no Node) in
# that Chromium: the npm registry's tarball, checked against the integrity npm records for it.
AXE=.venv/axe/axe.min.js
if [[ ! -s $AXE ]]; then
  echo "mxbench: fetching axe-core 4.10.3 for the report's accessibility test" >&2
  .venv/airflow/bin/python scripts/fetch_axe.py "$AXE" \
    || echo "mxbench: could not fetch axe-core: the accessibility test fails, saying why" >&2
fi

# The multi-worker test (CeleryExecutor) uses Redis as its broker: the server binary only, started
# and stopped by the test on a loopback port of its own (policy-rc.d keeps the package's own off).
if ! command -v redis-server >/dev/null; then
  echo "mxbench: installing redis-server for the multi-worker (Celery) tests (no server is started)" >&2
  install_debs redis-server || echo "mxbench: could not install redis-server: the Celery tests fail, saying why" >&2
fi

# test-only: moto's S3-compatible server (the artifact store of the multi-worker tests), kept out
# of the Airflow env: its Flask and Werkzeug pins are its own
make_venv s3 requirements-s3.txt
