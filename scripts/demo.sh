#!/usr/bin/env bash
# The main job: set up everything on first use, then run the benchmark DAG once: part of the
# cpu-demo matrix (1 and 2 workers, 2 hosts) with synthetic CIFAR-format data, on the local
# launcher, over SSH to two loopback sshd hosts, and as Kubernetes pods on the local Kubernetes
# stand-in (both started here, stopped at the end), 4 repeats each, and say where the report is
# (with the ssh/local and k8s/ssh ratios and their verdicts).
#   scripts/demo.sh
#   scripts/demo.sh '{"dataset": "/data/cifar-10-python.tar.gz"}'   # any trigger-form params
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/airflow-env.sh
mkdir -p "$MXBENCH_HOME"
log=$MXBENCH_HOME/demo.log
echo "mxbench: Airflow metadata DB and pools (log: $log)"
scripts/airflow-init.sh >"$log" 2>&1
# The ssh leg's hosts: two sshd on 127.0.0.1 and 127.0.0.2 (setup.sh installs openssh-server
# when root), as the Airflow connections mxbench_ssh_1 and mxbench_ssh_2. Without sshd the leg is
# skipped and the report says why.
cleanup() {
  python -m standins.sshd stop --root "$MXBENCH_HOME/sshd" >/dev/null 2>&1 || true
  python -m standins.kube stop --root "$MXBENCH_HOME/kube" >/dev/null 2>&1 || true
}
trap cleanup EXIT
skipped=""
if ! reason=$(python -m standins.sshd check); then
  skipped="ssh leg skipped: $reason"
else
  extra=$(python -c 'import json, sys; print(json.dumps({"mxbench_python": sys.argv[1]}))' "$PWD/.venv/train/bin/python")
  if exports=$(python -m standins.sshd start --root "$MXBENCH_HOME/sshd" --extra "$extra" 2>>"$log"); then
    eval "$exports"
    echo "mxbench: ssh leg: loopback sshd on 127.0.0.1 and 127.0.0.2, stopped when the demo ends"
  else
    skipped="ssh leg skipped: the loopback sshd did not start (see $log)"
  fi
fi
[[ -z $skipped ]] || echo "mxbench: $skipped"
# The Kubernetes leg's cluster: the local Kubernetes stand-in (a loopback API server that runs
# each pod as a process; no Kubernetes can run here), as the Airflow connection mxbench_kubernetes.
k8s_skipped=""
if kubeconfig=$(python -m standins.kube start --root "$MXBENCH_HOME/kube" 2>>"$log"); then
  AIRFLOW_CONN_MXBENCH_KUBERNETES=$(python - "$kubeconfig" "$PWD/.venv/train/bin/python" "$MXBENCH_HOME/data" <<'PY'
import json, sys
kubeconfig, python, data = sys.argv[1:]
print(json.dumps({"conn_type": "kubernetes", "extra": {
    "kube_config_path": kubeconfig, "namespace": "mxbench",
    "mxbench_pod": {"image": "mxbench-standin", "python": python, "data": {"host_path": data}}}}))
PY
)
  export AIRFLOW_CONN_MXBENCH_KUBERNETES
  echo "mxbench: kubernetes leg: the local Kubernetes stand-in (pods are processes here), stopped when the demo ends"
else
  k8s_skipped="kubernetes leg skipped: the local Kubernetes stand-in did not start (see $log)"
  echo "mxbench: $k8s_skipped"
fi
conf=${1:-$(python - "$skipped" "$k8s_skipped" <<'PY'
import json, sys
skipped = [s for s in sys.argv[1:] if s]
launchers = ["local"] + (["ssh"] if not sys.argv[1] else []) + (["kubernetes"] if not sys.argv[2] else [])
print(json.dumps({"preset": "cpu-demo", "only_variants": ["cpu1-bs64", "cpu2w-bs64", "cpu2h-bs64"],
                  "launchers": launchers, "repeats": 4, "epochs": 2, "notes": skipped}))
PY
)}
echo "mxbench: airflow dags test mxbench_benchmark -c '$conf'"
airflow dags test mxbench_benchmark -c "$conf" 2>&1 | tee -a "$log" \
  | grep --line-buffered -oE "mxbench: run .*|RunFailed: .*" || true
finished=$(grep -oE "DagRun Finished: .*run_duration=[0-9.]+, state=[a-z]+" "$log" | tail -1)
run_id=$(grep -oE "run_id=[^,]+" <<<"$finished" | cut -d= -f2-)
state=$(grep -oE "state=[a-z]+$" <<<"$finished" | cut -d= -f2)
echo "mxbench: DAG run ${run_id:-?} finished: ${state:-unknown}"
if [[ -n $run_id ]]; then
  report=$(python -c 'import sys; from mxbench import config; print(config.dag_run_dir("mxbench_benchmark", sys.argv[1]) / "report")' "$run_id")
  if [[ -f $report/report.md ]]; then
    for section in "Results" "Launcher speed ratio"; do
      sed -n "/^## $section/,/^## /p" "$report/report.md" | head -n -1
    done
    echo "mxbench: report: $report/report.html (also report.md, CSV tables and PNG plots there)"
  fi
fi
if [[ $state != success ]]; then
  echo "mxbench: the DAG run did not succeed; see $log" >&2
  exit 1
fi
