#!/usr/bin/env bash
# The main job: set up what it uses on first use, then run the benchmark DAG once under a real
# Airflow scheduler (scripts/demo_stack.py: api-server, dag-processor, scheduler, stopped at the
# end): cpu-demo's 2-host variant with synthetic CIFAR-format data, on the local launcher, over SSH
# to two sshd hosts (network namespaces joined by a 1 Gbit/s link, loopback addresses where
# namespaces cannot be made), and as Kubernetes pods on the local Kubernetes stand-in (two node
# namespaces with a VXLAN pod network between them; both started here, stopped at the end), in counterbalanced rounds, and print the report's verdicts (ssh/local,
# k8s/local, k8s/ssh) and where the report is, on disk and in the Airflow UI.
#   scripts/demo.sh
#   scripts/demo.sh '{"dataset": "/data/cifar-10-python.tar.gz"}'   # any trigger-form params
#   MXBENCH_DEMO_KEEP_UI=1 scripts/demo.sh                           # Airflow stays up until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "mxbench: set-up done ($SECONDS s)"
source scripts/airflow-env.sh
mkdir -p "$MXBENCH_HOME"
log=$MXBENCH_HOME/demo.log
echo "mxbench: Airflow metadata DB and pools (log: $log)"
scripts/airflow-init.sh >"$log" 2>&1
# The ssh leg's hosts: two sshd (setup.sh installs openssh-server when root), each in a network
# namespace of its own, joined by a link shaped to MXBENCH_DEMO_LINK_RATE (default 1gbit) and by a
# second, "slow" one (MXBENCH_DEMO_SLOW_LINK_RATE, default 4mbit: the cpu-link preset's, idle
# otherwise); where namespaces cannot be made, on 127.0.0.1 and 127.0.0.2, and the report says so.
# They are the Airflow connections mxbench_ssh_1 and mxbench_ssh_2. Without sshd the leg is skipped
# and the report says why.
cleanup() {
  python -m standins.sshd stop --root "$MXBENCH_HOME/sshd" >/dev/null 2>&1 || true
  python -m standins.kube stop --root "$MXBENCH_HOME/kube" >/dev/null 2>&1 || true
  echo "mxbench: the demo took $((SECONDS / 60)) min $((SECONDS % 60)) s, set-up included"
}
trap cleanup EXIT
skipped=""
if ! reason=$(python -m standins.sshd check); then
  skipped="ssh leg skipped: $reason"
else
  extra=$(python -c 'import json, sys; print(json.dumps({"mxbench_python": sys.argv[1]}))' "$PWD/.venv/train/bin/python")
  if exports=$(python -m standins.sshd start --root "$MXBENCH_HOME/sshd" --extra "$extra" \
      --link-rate "${MXBENCH_DEMO_LINK_RATE:-1gbit}" --link "slow=${MXBENCH_DEMO_SLOW_LINK_RATE:-4mbit}" \
      2>>"$log"); then
    eval "$exports"
    echo "mxbench: ssh leg: $(python -m standins.sshd describe --root "$MXBENCH_HOME/sshd"); stopped when the demo ends"
  else
    skipped="ssh leg skipped: the sshd hosts did not start (see $log)"
  fi
fi
[[ -z $skipped ]] || echo "mxbench: $skipped"
# The Kubernetes leg's cluster: the local Kubernetes stand-in (a loopback API server that runs
# each pod as a process; no Kubernetes can run here), as the Airflow connection mxbench_kubernetes.
# Its two nodes are network namespaces joined by a link of the ssh hosts' rate, each pod a namespace
# of its own, pods of different nodes talking through a VXLAN overlay (as flannel's vxlan backend);
# where namespaces cannot be made, the pods share the machine's stack, and the report says why.
k8s_skipped=""
if kubeconfig=$(python -m standins.kube start --root "$MXBENCH_HOME/kube" \
    --link-rate "${MXBENCH_DEMO_LINK_RATE:-1gbit}" 2>>"$log"); then
  AIRFLOW_CONN_MXBENCH_KUBERNETES=$(python - "$kubeconfig" "$PWD/.venv/train/bin/python" "$MXBENCH_HOME/data" <<'PY'
import json, sys
kubeconfig, python, data = sys.argv[1:]
print(json.dumps({"conn_type": "kubernetes", "extra": {
    "kube_config_path": kubeconfig, "namespace": "mxbench",
    "mxbench_pod": {"image": "mxbench-standin", "python": python, "data": {"host_path": data}}}}))
PY
)
  export AIRFLOW_CONN_MXBENCH_KUBERNETES
  echo "mxbench: kubernetes leg: the local Kubernetes stand-in (pods are processes here), stopped when the demo ends;" \
    "pod network: $(sed -n 's/^kube stand-in: pod network: //p' "$MXBENCH_HOME/kube/standin.log" | tail -n 1)"
else
  k8s_skipped="kubernetes leg skipped: the local Kubernetes stand-in did not start (see $log)"
  echo "mxbench: $k8s_skipped"
fi
# The 2-host variant in rounds, each round the three launchers back to back in counterbalanced
# order (which only the real scheduler keeps, see scripts/demo_stack.py): 6 rounds, the fewest a
# paired sign-flip test can reach p < 0.05 with (mxbench.stats.floors.rounds_needed), and a 7th unless
# the first 6 rounds' spread already gives every pair an interval within ±7.5% (stop_rule). 3 epochs: the first is warm-up, left out of the
# speed, and two epochs' readings make a round's ratio about a third less noisy than one
# (measured). About 13 s a run on 2 quiet cores, 18 s on busy ones: under 10 minutes in all.
# Params given on the command line (a JSON object) replace these one by one; notes add up.
conf=$(python - "$skipped" "$k8s_skipped" "${1:-"{}"}" <<'PY'
import json, sys
ssh_skipped, k8s_skipped, given = sys.argv[1:]
try:
    given = json.loads(given)
    assert isinstance(given, dict)
except (ValueError, AssertionError):
    sys.exit(f"mxbench: the demo's argument must be a JSON object of trigger-form params, got {given!r}")
launchers = ["local"] + (["ssh"] if not ssh_skipped else []) + (["kubernetes"] if not k8s_skipped else [])
notes = [s for s in (ssh_skipped, k8s_skipped) if s] + given.pop("notes", [])
# repeats given: exactly that many rounds, unless a budget is given too
# and up to 4 rounds beyond them in place of contended ones (other work on the machine): a neighbour of a
# few minutes costs a few rounds' time, not the verdict
budget = {} if "repeats" in given else {"repeats": 6, "max_repeats": 7, "target_gap": 0.15,
                                        "contended_replacements": 4}
# the quiet check before each run: at most 6 s (three looks), so a busy machine adds at most 2 minutes
print(json.dumps({"preset": "cpu-demo", "only_variants": ["cpu2h-bs64"], "launchers": launchers, **budget,
                  "epochs": 3, "quiet_wait_s": 6, **given, "notes": notes}))
PY
)
# the scheduler and the task processes it starts inherit the AIRFLOW_CONN_* exported above
python scripts/demo_stack.py "$conf"
