"""Launch overhead of the Kubernetes launcher against the ssh launcher (run in the orchestration env):

    .venv/airflow/bin/python benchmarks/k8s_overhead.py [--repeats 3] [--skip-scheduler] [--keep]

Starts two loopback sshd hosts (standins.sshd) and the loopback Kubernetes API stand-in
(standins.kube: two nodes, every pod a local process, as the Airflow connection
mxbench_kubernetes) in a scratch folder, which also holds MXBENCH_HOME and a SQLite Airflow home,
and runs cpu1-bs64 (one pod) and cpu2h-bs64 (5 role pods on 2 nodes), 1 epoch, 1000 synthetic
images, under the ssh and kubernetes launchers in the same DAG run: first through dag.test(), then
through a real Airflow 3 stack in the same home (api-server, dag-processor, scheduler with the
LocalExecutor; see _stack.py and ssh_overhead.py). Per mapped run task: overhead = task duration -
meta.json trainer_wall_s (first role start to last role exit), split into Airflow's part (task
duration - run_one's duration) and the launcher's (the rest: for kubernetes, reading the nodes,
the scheduler pod's start-up wait, log fetching, pod deletion; kubernetes.json's step timings
setup_s / roles_s / cleanup_s are printed too). The other pods' start-up and the launcher's exit
detection fall inside trainer_wall_s (a role's clock starts when its pod is created), so per
variant the median task and trainer times are printed as well; trainer time is where a slower
pod start shows.
Target (the issue): "Per-run overhead of the k8s leg (task time - trainer wall time) against ssh,
same variant, same run. Target on the stand-in: <= 3 s median per run." Both readings are printed:
kubernetes - ssh (the median overheads' difference, the key line) and the kubernetes overhead
alone. The 1-minute load average is printed with the figures: the machine is shared. Exits 1 when
a DAG run fails or nothing was measured; the scratch folder is removed on success (unless --keep)
and kept otherwise.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from _stack import TRAIN_PYTHON, airflow, begin, finish, load_dag, measure, real_scheduler, stack_env, step_timings

K8S_TARGET_S = 3.0
LAUNCHERS = ("ssh", "kubernetes")
VARIANTS = ("cpu1-bs64", "cpu2h-bs64")


def load() -> str:
    return f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"


def med(rows, key) -> float:
    return statistics.median(r[key] for r in rows)


def report(title: str, run, tis, dag_dir: Path):
    """Print one mode's lines; (DAG run ok and both launchers measured, {reading: seconds})."""
    found = measure(tis, dag_dir)
    print(f"\n== {title}: DAG run {run.run_id}: {run.state}; runs measured: {sum(map(len, found.values()))}; "
          f"{load()}")
    for launcher in LAUNCHERS:
        for variant in VARIANTS:
            rows = [r for r in found.get(launcher, []) if r["variant"] == variant]
            if rows:
                print(f"{launcher:>10} {variant:<11} medians over {len(rows)}: task {med(rows, 'task'):6.2f} s, "
                      f"trainer {med(rows, 'trainer'):6.2f} s, overhead {med(rows, 'overhead'):5.2f} s "
                      f"= Airflow {med(rows, 'airflow'):5.2f} + launcher {med(rows, 'launcher'):5.2f}  "
                      f"(overhead max {max(r['overhead'] for r in rows):.2f} s)")
    for variant, by_step in sorted(step_timings(dag_dir, "kubernetes", "kubernetes.json").items()):
        trainer = [r["trainer"] for r in found.get("kubernetes", []) if r["variant"] == variant]
        extra = (f"; roles - trainer {statistics.median(by_step['roles_s']) - statistics.median(trainer):.2f} s "
                 "(scheduler pod start-up wait, log fetch, close)" if trainer and "roles_s" in by_step else "")
        print(f"{'kubernetes':>10} {variant:<11} steps (kubernetes.json), medians: " + ", ".join(
            f"{name[:-2]} {statistics.median(values):.2f} s" for name, values in by_step.items()) + extra)
    for variant, by_step in sorted(step_timings(dag_dir, "ssh", "ssh.json").items()):
        print(f"{'ssh':>10} {variant:<11} steps (ssh.json), medians: " + ", ".join(
            f"{name[:-2]} {statistics.median(values):.2f} s" for name, values in by_step.items()))
    readings = {}
    if set(LAUNCHERS) <= found.keys():
        for variant in VARIANTS:
            pair = [[r for r in found[launcher] if r["variant"] == variant] for launcher in LAUNCHERS]
            if all(pair):
                overhead = med(pair[1], 'overhead') - med(pair[0], 'overhead')
                print(f"kubernetes - ssh, {variant}: overhead {overhead:+.2f} s "
                      f"median per run; task time {med(pair[1], 'task') - med(pair[0], 'task'):+.2f} s, trainer "
                      f"{med(pair[1], 'trainer') - med(pair[0], 'trainer'):+.2f} s (pod start-up of the roles "
                      "after the scheduler counts as trainer time)")
        k8s, ssh = med(found["kubernetes"], "overhead"), med(found["ssh"], "overhead")
        readings = {"diff": k8s - ssh, "k8s": k8s, "ssh": ssh}
        print(f"kubernetes - ssh: {k8s - ssh:+.2f} s median per run (target <= {K8S_TARGET_S:g} s on the stand-in): "
              f"{'met' if k8s - ssh <= K8S_TARGET_S else 'NOT met'}")
        print(f"kubernetes overhead alone: {k8s:.2f} s median per run (ssh {ssh:.2f} s) against the "
              f"{K8S_TARGET_S:g} s target: {'met' if k8s <= K8S_TARGET_S else 'NOT met'}")
    else:
        print(f"not measured (launchers measured: {sorted(found) or 'none'})")
    return run.state == "success" and bool(readings), readings


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-scheduler", action="store_true", help="dag.test() only")
    args, scratch = begin(parser, "k8s-overhead")
    started = time.monotonic()
    print(f"scratch folder: {scratch}; {load()}")
    conf = {"preset": "cpu-demo", "only_variants": list(VARIANTS), "launchers": list(LAUNCHERS),
            "repeats": args.repeats, "epochs": 1, "synthetic_images": 1000}
    port = stack_env(scratch)  # before anything imports airflow: it reads its configuration once
    from standins import sshd
    from standins.kube import start as start_standin

    fleet = sshd.start(scratch / "sshd")
    standin = None
    ok, results = True, {}
    try:
        standin = start_standin(scratch / "kube", nodes=2, gpus_per_node=0, validate=True)
        data = scratch / "data"  # config.data_dir(): where prepare_data puts the .rec files
        data.mkdir(exist_ok=True)
        os.environ.update(fleet.airflow_env(mxbench_python=str(TRAIN_PYTHON)))
        os.environ["AIRFLOW_CONN_MXBENCH_KUBERNETES"] = json.dumps({"conn_type": "kubernetes", "extra": {
            "kube_config_path": str(standin.kubeconfig), "namespace": "mxbench",
            "mxbench_pod": {"image": "mxbench-standin", "python": str(TRAIN_PYTHON),
                            "data": {"host_path": str(data)}}}})
        airflow("db", "migrate")
        from mxbench import config

        assert config.data_dir().resolve() == data.resolve(), config.data_dir()
        run = load_dag().test(run_conf=conf)
        good, results["dag.test"] = report("dag.test", run, run.get_task_instances(),
                                           config.dag_run_dir(run.dag_id, run.run_id))
        ok &= good
        if not args.skip_scheduler:
            logs = scratch / "logs"
            logs.mkdir()
            try:
                run, tis = real_scheduler(conf, port, logs, run_prefix="k8s_overhead")
            except RuntimeError as exc:
                print(f"\n== real scheduler: {exc}", file=sys.stderr)
                ok, results["real scheduler"] = False, {}
            else:
                good, results["real scheduler"] = report("real scheduler (LocalExecutor)", run, tis,
                                                         config.dag_run_dir(run.dag_id, run.run_id))
                ok &= good
    finally:
        if standin is not None:
            standin.stop()
        fleet.stop()
    print()
    for title, r in results.items():
        if r:
            print(f"{title + ':':<16}kubernetes - ssh {r['diff']:+.2f} s "
                  f"({'met' if r['diff'] <= K8S_TARGET_S else 'NOT met'}); kubernetes alone {r['k8s']:.2f} s "
                  f"({'met' if r['k8s'] <= K8S_TARGET_S else 'NOT met'}); ssh {r['ssh']:.2f} s "
                  f"[target <= {K8S_TARGET_S:g} s median per run]")
        else:
            print(f"{title + ':':<16}not measured")
    print(f"wall time: {time.monotonic() - started:.0f} s; {load()}")
    return finish(ok, scratch, args.keep)


if __name__ == "__main__":
    sys.exit(main())
