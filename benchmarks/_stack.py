"""Shared parts of the benchmarks that run Airflow (harness_overhead.py, ssh_overhead.py,
k8s_overhead.py, build_overhead.py, artifacts_overhead.py): the command line's --keep and the
scratch folder (begin, finish), the scratch Airflow home's environment, one triggered DAG run
through the stand-ins' real Airflow 3 stack (standins/airflow_stack.py: api-server, dag-processor,
scheduler with the LocalExecutor), and the per-run overhead of the mapped run tasks.
Nothing here imports Airflow at module level: it reads its configuration once, so stack_env()
must come first.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mxbench_train.localhost import free_port
from standins.airflow_stack import AirflowStack, checkout_env, make_pools, server_env

REPO = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
DAG_ID = "mxbench_benchmark"
SCHEDULER_DEADLINE_S = 15 * 60
TRAIN_PYTHON = REPO / ".venv" / "train" / "bin" / "python"
# Airflow settings of the stack that shorten the gap between two runs of one pool (harness_overhead.py
# measures it before/after; --airflow-defaults there leaves them out)
SCHEDULER_TUNING = {
    # a freed pool slot is seen at the scheduler's next loop, which sleeps first while idle (a run
    # training): 1 s by default; a loop costs ~20 ms CPU, so the scheduler took 5 % of a core over a
    # DAG run at 1 s, 9 % at 0.5 s, 14 % at 0.25 s; 0.5 s already keeps the worst gap under 1 s
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
}


def airflow(*args, timeout=600):
    done = subprocess.run([AIRFLOW, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"airflow {' '.join(args)} failed:\n{(done.stderr or done.stdout)[-3000:]}")
    return done.stdout


def stack_env(scratch: Path, tuned: bool = True) -> int:
    """Point MXBENCH_HOME and a SQLite AIRFLOW_HOME into scratch, with free ports and one shared JWT
    secret for the api-server and the scheduler; call before anything imports airflow. With tuned,
    also the scheduler settings of SCHEDULER_TUNING (tuned=False: Airflow's defaults). The port."""
    port = free_port()
    os.environ.update({**checkout_env(scratch, scratch / "airflow"), **server_env(port)})
    if tuned:
        os.environ.update(SCHEDULER_TUNING)
    return port


def begin(parser: argparse.ArgumentParser, name: str):
    """Add --keep to parser and parse the command line, then make the benchmark's scratch folder
    (mxbench-<name>-* in the temp folder; finish() removes it). (args, scratch folder)."""
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder even on success")
    args = parser.parse_args()
    return args, Path(tempfile.mkdtemp(prefix=f"mxbench-{name}-"))


def finish(ok: bool, scratch: Path, keep: bool) -> int:
    """The exit status; the scratch folder is removed after a good run (unless keep), else kept."""
    if ok and not keep:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"kept {scratch}", file=sys.stderr)
    return 0 if ok else 1


def load_dag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags")).dags[DAG_ID]


def measure(tis, dag_dir: Path) -> dict:
    """{launcher: [{key, variant, task, trainer, overhead, airflow, launcher}]} over the successful
    mapped run tasks: overhead = task duration - trainer_wall_s, split into Airflow's part (task
    duration - run_one's duration_s) and the launcher's (duration_s - trainer_wall_s)."""
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


def step_timings(dag_dir: Path, launcher: str, record: str) -> dict:
    """{variant: {step_s: [seconds]}} from each <variant>__<launcher>__* run folder's record file
    (ssh.json, kubernetes.json)."""
    steps = {}
    for run_dir in dag_dir.glob(f"*__{launcher}__*/"):
        path = run_dir / record
        data = json.loads(path.read_text()) if path.exists() else {}
        for name, value in data.items():
            if name.endswith("_s") and isinstance(value, (int, float)):
                steps.setdefault(run_dir.name.split("__")[0], {}).setdefault(name, []).append(value)
    return steps


def cpu_seconds(procs: list) -> dict:
    """{name: CPU seconds so far} of each of the stack's processes itself, with its children that have
    ended (the dag-processor's parse processes); never the scheduler's executor workers, which live
    on and run the tasks."""
    import psutil

    out = {}
    for proc in procs:
        name = proc.args[1]
        try:
            t = psutil.Process(proc.pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        out[name] = t.user + t.system + t.children_user + t.children_system
    return out


def real_scheduler(conf: dict, port: int, logs: Path, run_prefix: str = "ssh_overhead", usage: dict | None = None):
    """Trigger conf through api-server + dag-processor + scheduler; (dag run, task instances). A
    usage dict gets wall_s (trigger to the DAG run's end) and cpu_s ({process: CPU seconds in it})."""
    from airflow.models import DagRun, TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    make_pools(airflow)
    airflow("dags", "reserialize")
    # the environment is stack_env()'s: this process's, where the benchmark reads the metadata DB
    stack = AirflowStack(logs.parent, checkout=False, port=port, logs=logs)
    procs = stack.procs
    try:
        stack.start()
        airflow("dags", "unpause", DAG_ID)
        run_id = f"{run_prefix}__{time.strftime('%Y%m%dT%H%M%S')}"
        cpu_before, wall_before = cpu_seconds(procs), time.monotonic()
        airflow("dags", "trigger", DAG_ID, "-c", json.dumps(conf), "-r", run_id)
        end = time.monotonic() + SCHEDULER_DEADLINE_S
        while True:
            time.sleep(5)
            with create_session() as session:
                run = session.scalars(select(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == run_id)).one()
                state = run.state
            if state in ("success", "failed"):
                break
            dead = stack.ended()
            if dead or time.monotonic() > end:
                raise RuntimeError(f"DAG run {run_id} still {state} "
                                   f"({', '.join(dead) + ' ended' if dead else 'deadline'}); see {logs}")
        if usage is not None:
            cpu_after = cpu_seconds(procs)
            usage.update(wall_s=time.monotonic() - wall_before,
                         cpu_s={name: cpu_after[name] - cpu_before.get(name, 0.0) for name in cpu_after})
        with create_session() as session:
            run = session.scalars(select(DagRun).where(DagRun.dag_id == DAG_ID, DagRun.run_id == run_id)).one()
            tis = list(session.scalars(select(TaskInstance).where(TaskInstance.dag_id == DAG_ID,
                                                                  TaskInstance.run_id == run_id)))
            session.expunge_all()
        return run, tis
    finally:
        left = stack.stop()
        if left:
            print(f"processes outlived the Airflow stack: {left}", file=sys.stderr)
