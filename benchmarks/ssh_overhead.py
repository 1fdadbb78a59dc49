"""Launch overhead of the ssh launcher against the local launcher (run in the orchestration env):

    .venv/airflow/bin/python benchmarks/ssh_overhead.py [--repeats 3] [--skip-scheduler] [--keep]

Starts two loopback sshd hosts (mxbench.loopback_sshd) in a scratch folder, which also holds
MXBENCH_HOME and a SQLite Airflow home, and runs cpu1-bs64 and cpu2h-bs64 (1 epoch, 1000
synthetic images) under both launchers, first through dag.test(), then through a real Airflow 3
deployment in the same home: `airflow api-server`, `dag-processor` and `scheduler` with the
LocalExecutor (Airflow's default; it accepts SQLite, as `airflow standalone` does), free ports,
one shared JWT secret, the pools of scripts/airflow-init.sh, the DAG triggered with the same conf.
Per mapped run task: overhead = task duration - meta.json trainer_wall_s (first role start to
last role exit), split into Airflow's part (task duration - run_one's duration) and the
launcher's (the rest: for ssh, connect, probe, staging and fetching the logs; ssh.json's step
timings are printed too). An ssh role's own start-up over its channel (session, supervisor) falls
inside trainer_wall_s, so per variant the median task and trainer times are printed as well.
Targets: ssh adds <= 1.0 s median per run; staging to hosts that already have the data set
(ssh.json data_copied_to empty) <= 0.5 s median. Exits 1 when a DAG run fails or nothing was
measured; the scratch folder is removed on success (unless --keep) and kept otherwise.
"""
import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DAG_ID = "mxbench_benchmark"
SSH_TARGET_S, STAGING_TARGET_S = 1.0, 0.5
SCHEDULER_DEADLINE_S = 15 * 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def airflow(*args, timeout=600):
    done = subprocess.run([AIRFLOW, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"airflow {' '.join(args)} failed:\n{(done.stderr or done.stdout)[-3000:]}")
    return done.stdout


def measure(tis, dag_dir: Path) -> dict:
    """{launcher: [{key, overhead, airflow, launcher}]} over the successful mapped run tasks."""
    out = {}
    for ti in tis:
        if not (ti.task_id.endswith(".run_variant") and ti.state == "success"):
            continue
        meta_path = dag_dir / str(ti.rendered_map_index) / "meta.json"  # the mapped task's label: its run key
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        if not meta.get("trainer_wall_s") or meta.get("reused"):
            continue
        task_s = (ti.end_date - ti.start_date).total_seconds()
        out.setdefault(meta["launcher"], []).append(
            {"key": meta["key"], "variant": meta["variant"]["id"], "task": task_s, "trainer": meta["trainer_wall_s"],
             "overhead": task_s - meta["trainer_wall_s"],
             "airflow": task_s - meta["duration_s"], "launcher": meta["duration_s"] - meta["trainer_wall_s"]})
    return out


def report(title: str, run, tis, dag_dir: Path):
    """Print one mode's lines; (DAG run ok and both launchers measured, summary line, [seconds of
    staging runs that found the data already there])."""
    found = measure(tis, dag_dir)
    print(f"\n== {title}: DAG run {run.run_id}: {run.state}; runs measured: {sum(map(len, found.values()))}")
    medians = {}
    for launcher in sorted(found):
        rows = found[launcher]
        medians[launcher] = med = statistics.median(r["overhead"] for r in rows)
        print(f"{launcher:>5}: overhead per run median {med:.2f} s, max {max(r['overhead'] for r in rows):.2f} s "
              f"over {len(rows)} runs  (of which Airflow median {statistics.median(r['airflow'] for r in rows):.2f} s, "
              f"launcher median {statistics.median(r['launcher'] for r in rows):.2f} s)")
        for r in sorted(rows, key=lambda r: r["key"]):
            print(f"         {r['key']:<24} {r['overhead']:6.2f} s = Airflow {r['airflow']:5.2f} + launcher "
                  f"{r['launcher']:5.2f}")
    if {"local", "ssh"} <= medians.keys():
        diff = medians["ssh"] - medians["local"]
        verdict = "OK" if diff <= SSH_TARGET_S else "OVER"
        print(f"ssh - local: {diff:+.2f} s median per run  (target: ssh adds <= {SSH_TARGET_S} s median per run)  "
              f"{verdict}")
        line = (f"local median {medians['local']:.2f} s, ssh median {medians['ssh']:.2f} s, ssh - local = "
                f"{diff:+.2f} s  (target <= {SSH_TARGET_S} s)  {verdict}")
    else:
        line = f"not measured (launchers measured: {sorted(medians) or 'none'})"
    for variant in sorted({r["variant"] for rows in found.values() for r in rows}):
        cells = []
        for launcher in sorted(found):
            rows = [r for r in found[launcher] if r["variant"] == variant]
            if rows:
                cells.append(f"{launcher} task {statistics.median(r['task'] for r in rows):.2f} s, trainer "
                             f"{statistics.median(r['trainer'] for r in rows):.2f} s")
        print(f"{variant}: medians: {'; '.join(cells)}")
    hits, copies, steps = [], [], {}
    for run_dir in dag_dir.glob("*__ssh__*/"):
        record = json.loads((run_dir / "ssh.json").read_text()) if (run_dir / "ssh.json").exists() else {}
        for name, value in record.items():
            if name.endswith("_s"):
                steps.setdefault(run_dir.name.split("__")[0], {}).setdefault(name, []).append(value)
        if "data_s" in record:
            started = json.loads((run_dir / "meta.json").read_text()).get("started_at") or 0
            entry = (started, run_dir.name, record["data_copied_to"], record["data_s"])
            (copies if entry[2] else hits).append(entry)
    for variant, by_step in sorted(steps.items()):  # the ssh launcher's own timings; roles ~ trainer_wall_s
        print(f"{variant}: ssh steps (ssh.json), medians: " + ", ".join(
            f"{name[:-2]} {statistics.median(values):.2f} s" for name, values in by_step.items()))
    for _, key, copied_to, seconds in sorted(copies):
        print(f"data staging, copying: {key} copied it to {', '.join(copied_to)} in {seconds:.2f} s")
    if hits:
        print(f"data staging, host already has it: median {statistics.median(h[3] for h in hits):.3f} s, "
              f"max {max(h[3] for h in hits):.3f} s over {len(hits)} runs")
    ok = run.state == "success" and {"local", "ssh"} <= medians.keys()
    return ok, line, [h[3] for h in hits]


def start_bg(name: str, args, logs: Path, procs: list):
    log = open(logs / f"{name}.log", "wb")
    procs.append((name, subprocess.Popen([AIRFLOW, *args], stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)))
    log.close()


def stop_bg(procs: list):
    for _, proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    end = time.monotonic() + 30
    for name, proc in procs:
        try:
            proc.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"{name} did not stop on SIGTERM: SIGKILL", file=sys.stderr)
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of its group is left (executor workers)
        except ProcessLookupError:
            pass
        proc.wait()


def real_scheduler(conf: dict, port: int, logs: Path):
    """Trigger conf through api-server + dag-processor + scheduler; (dag run, task instances)."""
    from sqlalchemy import select

    from airflow.models import DagRun, TaskInstance
    from airflow.utils.session import create_session

    from mxbench.variants import machine_sets

    for machines, launchers in machine_sets().items():  # as scripts/airflow-init.sh makes them
        airflow("pools", "set", f"mxbench_{machines}", "1", f"mxbench: one run at a time on the {machines} "
                f"machines ({', '.join(launchers)})")
    airflow("dags", "reserialize")
    procs = []
    try:
        start_bg("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                 logs, procs)
        start_bg("dag-processor", ["dag-processor"], logs, procs)
        start_bg("scheduler", ["scheduler"], logs, procs)
        end = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=2).read()
                break
            except OSError:
                dead = [name for name, p in procs if p.poll() is not None]
                if dead or time.monotonic() > end:
                    raise RuntimeError(f"the api-server did not come up ({', '.join(dead) or 'timeout'} ended); "
                                       f"see {logs}")
                time.sleep(1)
        airflow("dags", "unpause", DAG_ID)
        run_id = f"ssh_overhead__{time.strftime('%Y%m%dT%H%M%S')}"
        airflow("dags", "trigger", DAG_ID, "-c", json.dumps(conf), "-r", run_id)
        end = time.monotonic() + SCHEDULER_DEADLINE_S
        while True:
            time.sleep(5)
            with create_session() as session:
                run = session.scalars(select(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == run_id)).one()
                state = run.state
            if state in ("success", "failed"):
                break
            dead = [name for name, p in procs if p.poll() is not None]
            if dead or time.monotonic() > end:
                raise RuntimeError(f"DAG run {run_id} still {state} ({', '.join(dead) + ' ended' if dead else 'deadline'})"
                                   f"; see {logs}")
        with create_session() as session:
            run = session.scalars(select(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == run_id)).one()
            tis = list(session.scalars(select(TaskInstance).where(TaskInstance.dag_id == DAG_ID,
                                                                  TaskInstance.run_id == run_id)))
            session.expunge_all()
        return run, tis
    finally:
        stop_bg(procs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-scheduler", action="store_true", help="dag.test() only")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder even on success")
    args = parser.parse_args()
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="mxbench-ssh-overhead-"))
    print(f"scratch folder: {scratch}")
    conf = {"preset": "cpu-demo", "only_variants": ["cpu1-bs64", "cpu2h-bs64"], "launchers": ["local", "ssh"],
            "repeats": args.repeats, "epochs": 1, "synthetic_images": 1000}
    port, log_port = free_port(), free_port()
    # before anything imports airflow: it reads its configuration once
    os.environ.update(
        MXBENCH_HOME=str(scratch), AIRFLOW_HOME=str(scratch / "airflow"),
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"), AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "plugins"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__EXECUTOR="LocalExecutor",
        AIRFLOW__API__HOST="127.0.0.1", AIRFLOW__API__PORT=str(port), AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(log_port),  # the scheduler's log server (default 8793)
        AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_urlsafe(64))  # the scheduler signs, the api-server checks
    from mxbench import loopback_sshd

    fleet = loopback_sshd.start(scratch / "sshd")
    ok, lines, hits = True, {}, []
    try:
        os.environ.update(fleet.airflow_env(mxbench_python=str(REPO / ".venv" / "train" / "bin" / "python")))
        airflow("db", "migrate")
        from airflow.dag_processing.dagbag import DagBag

        from mxbench import config

        dag = DagBag(dag_folder=str(REPO / "dags")).dags[DAG_ID]
        run = dag.test(run_conf=conf)
        good, lines["dag.test"], found = report("dag.test", run, run.get_task_instances(),
                                                config.dag_run_dir(run.run_id))
        ok &= good
        hits += found
        if not args.skip_scheduler:
            logs = scratch / "logs"
            logs.mkdir()
            try:
                run, tis = real_scheduler(conf, port, logs)
            except RuntimeError as exc:
                print(f"\n== real scheduler: {exc}", file=sys.stderr)
                ok, lines["real scheduler"] = False, f"failed: {exc}".splitlines()[0]
            else:
                good, lines["real scheduler"], found = report("real scheduler (LocalExecutor)", run, tis,
                                                              config.dag_run_dir(run.run_id))
                ok &= good
                hits += found
    finally:
        fleet.stop()
    print()
    for title, line in lines.items():
        print(f"{title + ':':<17}{line}")
    if hits:
        verdict = "OK" if statistics.median(hits) <= STAGING_TARGET_S else "OVER"
        print(f"data to a host that has it: median {statistics.median(hits):.3f} s over {len(hits)} runs "
              f"(target <= {STAGING_TARGET_S} s)  {verdict}")
    else:
        ok = False
        print("data to a host that has it: no ssh run found its data already there")
    print(f"wall time: {time.monotonic() - started:.0f} s")
    if ok and not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"kept {scratch}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
