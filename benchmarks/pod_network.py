"""The k8s/ssh ratio over the pod network (a VXLAN overlay) and over host networking, side by side
in one DAG run (run in the orchestration env, as root):

    .venv/airflow/bin/python benchmarks/pod_network.py [--repeats 3] [--rate 1gbit] [--keep]

Starts two sshd hosts in network namespaces joined by a tbf-shaped link (standins.sshd with
link_rate) and the Kubernetes stand-in with its pod network (standins.kube: two node namespaces
behind links of the same rate, each pod a namespace of its own, a VXLAN overlay between the nodes)
in a scratch folder, which also holds MXBENCH_HOME and a SQLite Airflow home, and runs through
dag.test() cpu2h-bs64 (2 hosts x 1 worker, dist_sync, ResNet-8, 1 epoch of 1000 synthetic images)
under ssh and kubernetes, and its twin cpu2h-bs64-hostnet (the same pods with hostNetwork: true,
kubernetes only), ``--repeats`` times each. Per variant and launcher: the median samples/s; then
k8s/ssh over the overlay and over host networking, and the megabytes the nodes sent through the
overlay's VXLAN devices (only the pod-network runs cross it).

What it says and does not: every host and node is this machine's cores; the pods' traffic crosses
the overlay (encapsulation, a bridge and a veth more than the hosts' path), the hostNetwork pods'
the nodes' own link like the ssh hosts'. dag.test() runs the mapped runs in its own order, not in
counterbalanced rounds: a drift of the machine falls on the launchers unevenly (the demo's rounds
are the paired comparison). The 1-minute load average is printed with the figures. Exits 1 when
namespaces cannot be made or a run fails; the scratch folder is removed on success (unless
--keep) and kept otherwise.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import pandas as pd
from _stack import TRAIN_PYTHON, airflow, begin, finish, load_dag, stack_env

POD_NET, HOST_NET = "cpu2h-bs64", "cpu2h-bs64-hostnet"


def load() -> str:
    return f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def vxlan_sent_mb(network: dict) -> float:
    """Megabytes every node has sent into the overlay so far (its VXLAN device's transmitted bytes)."""
    total = 0
    for ns in network["node_namespaces"]:
        shown = subprocess.run(["ip", "-n", ns, "-j", "-s", "link", "show", network["vxlan_device"]],
                               capture_output=True, text=True, check=True).stdout
        total += json.loads(shown)[0]["stats64"]["tx"]["bytes"]
    return total / 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", default="1gbit", help="the ssh hosts' and the nodes' link rate (tc), e.g. 1gbit")
    args, scratch = begin(parser, "pod-network")
    started = time.monotonic()
    print(f"scratch folder: {scratch}; {load()}")
    conf = {"preset": "cpu-demo", "only_variants": [POD_NET, HOST_NET], "launchers": ["ssh", "kubernetes"],
            "repeats": args.repeats, "epochs": 1, "synthetic_images": 1000}
    stack_env(scratch)  # before anything imports airflow: it reads its configuration once
    from standins import sshd
    from standins.kube import start as start_standin

    fleet = sshd.start(scratch / "sshd", link_rate=args.rate)
    standin = None
    try:
        standin = start_standin(scratch / "kube", nodes=2, gpus_per_node=0, validate=True, link_rate=args.rate)
        if fleet.network["kind"] != "netns" or standin.network["kind"] != "vxlan":
            print(f"no namespaces here: {fleet.network.get('why') or standin.network.get('why')}", file=sys.stderr)
            return finish(False, scratch, args.keep)
        print(f"ssh hosts: {fleet.describe_network()}")
        said = (scratch / "kube" / "standin.log").read_text().split("pod network: ")[1].splitlines()[0]
        print(f"pod network: {said}")
        data = scratch / "data"  # config.data_dir(): where prepare_data puts the .rec files
        data.mkdir(exist_ok=True)
        os.environ.update(fleet.airflow_env(mxbench_python=str(TRAIN_PYTHON)))
        os.environ["AIRFLOW_CONN_MXBENCH_KUBERNETES"] = json.dumps({"conn_type": "kubernetes", "extra": {
            "kube_config_path": str(standin.kubeconfig), "namespace": "mxbench",
            "mxbench_pod": {"image": "mxbench-standin", "python": str(TRAIN_PYTHON), "allow_host_network": True,
                            "data": {"host_path": str(data)}}}})
        airflow("db", "migrate")
        from mxbench import config

        before = vxlan_sent_mb(standin.network)
        run = load_dag().test(run_conf=conf)
        overlay_mb = vxlan_sent_mb(standin.network) - before
        runs = pd.read_csv(config.dag_run_dir(run.dag_id, run.run_id) / "tables" / "runs.csv")
    finally:
        if standin is not None:
            standin.stop()
        fleet.stop()
    ok = run.state == "success" and bool((runs["status"] == "ok").all())
    print(f"\nDAG run {run.run_id}: {run.state}; {load()}")
    medians = {}
    for (variant, launcher), group in runs.groupby(["variant", "launcher"]):
        values = group["samples_per_sec"].dropna().tolist()
        medians[variant, launcher] = statistics.median(values) if values else float("nan")
        print(f"{variant:<19} {launcher:<10} samples/s {', '.join(f'{v:.1f}' for v in values):<24} "
              f"median {medians[variant, launcher]:.1f}")
    nan = float("nan")
    ssh = medians.get((POD_NET, "ssh"), nan)
    print(f"k8s/ssh over the VXLAN overlay (pod network): {medians.get((POD_NET, 'kubernetes'), nan) / ssh:.3f}")
    print(f"k8s/ssh over host networking (hostNetwork):   {medians.get((HOST_NET, 'kubernetes'), nan) / ssh:.3f}")
    print(f"the nodes sent {overlay_mb:.1f} MB through the overlay's VXLAN devices")
    print(f"wall time: {time.monotonic() - started:.0f} s; {load()}")
    return finish(ok, scratch, args.keep)


if __name__ == "__main__":
    sys.exit(main())
