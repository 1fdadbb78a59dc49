"""The demo's Airflow: runs one DAG run of mxbench_benchmark through a real Airflow stack and
prints it as it goes. scripts/demo.sh calls it, after sourcing scripts/airflow-env.sh and
exporting the AIRFLOW_CONN_* connections (the scheduler and its task processes inherit them).

    .venv/airflow/bin/python scripts/demo_stack.py '<conf JSON>'

Why the real scheduler and not ``airflow dags test``: the scheduler queues the mapped run task's
instances in map-index order, which is the order ``expand_runs`` emits (counterbalanced rounds:
a b, b a, ...), and the one-slot pool runs them one at a time; ``dags test`` runs them in the
iteration order of a Python set, which leaves each launcher's repeats in a block.

The stack (standins/airflow_stack.py): api-server (one worker), dag-processor and scheduler
(LocalExecutor, the SQLite metadata DB under $AIRFLOW_HOME), on 127.0.0.1 and a free port; the
simple auth manager with one user, admin, whose password is in a 0600 file. The DAG run is triggered through the REST
API; each run is printed as it ends, then the report's tables and its address in the UI. The
stack is stopped at the end (MXBENCH_DEMO_KEEP_UI=1: on Ctrl-C instead), process groups and
every process they started, and anything left is named.
"""
import json
import os
import signal
import sys
import time
import urllib.parse
from pathlib import Path

from standins.airflow_stack import AirflowStack, StackError

DAG_ID = "mxbench_benchmark"
START_DEADLINE_S = 300  # api-server answering, then the DAG parsed: about a minute on 2 busy cores
POLL_S = 3  # each poll is a request the api-server answers while a run trains: not too often
ENDED = ("success", "failed", "skipped", "upstream_failed", "removed", "up_for_retry")


def demo_stack(home: Path) -> AirflowStack:
    """The stack in AIRFLOW_HOME (its folders and settings from scripts/airflow-env.sh), one user,
    admin, whose password is kept in home/demo-passwords.json from one demo to the next."""
    return AirflowStack(home, users={"admin": "admin"}, logs=home / "logs" / "stack",
                        passwords_file=home / "demo-passwords.json", checkout=False,
                        # the DAG files do not change during a demo: parse them once, not every 30 s while runs train
                        env={"AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600"})


def start(stack: AirflowStack) -> str:
    """Start the stack and wait until the DAG is parsed; admin's token."""
    stack.start(deadline_s=START_DEADLINE_S)
    token = stack.token("admin")

    def import_errors() -> str:
        errors = stack.call("GET", "/api/v2/importErrors", token).json().get("import_errors", [])
        return "; ".join(f"{e['filename']}: {e['stack_trace'].strip().splitlines()[-1]}" for e in errors)

    stack.wait_for(lambda: stack.call("GET", f"/api/v2/dags/{DAG_ID}", token).status == 200, START_DEADLINE_S,
                   f"the dag-processor to parse {DAG_ID}", every=1, explain=import_errors)
    return token


def trigger(stack: AirflowStack, token: str, conf: dict) -> str:
    paused = stack.call("PATCH", f"/api/v2/dags/{DAG_ID}", token, {"is_paused": False})
    if paused.status != 200:
        raise StackError(f"could not unpause {DAG_ID}: {paused.status} {paused.text[:300]}")
    answer = stack.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", token, {"logical_date": None, "conf": conf})
    if answer.status != 200:
        raise StackError(f"the DAG run was refused: {answer.status} {answer.text[:1000]}")
    return answer.json()["dag_run_id"]


def task_instances(stack: AirflowStack, token: str, run_path: str) -> list:
    found, offset = [], 0
    while True:
        page = stack.call("GET", f"{run_path}/taskInstances?limit=100&offset={offset}", token)
        if page.status != 200:
            return found
        body = page.json()
        found += body["task_instances"]
        offset += len(body["task_instances"])
        if not body["task_instances"] or offset >= body["total_entries"]:
            return found


def follow(stack: AirflowStack, token: str, run_id: str) -> str:
    """Print each task instance as it ends (the mapped runs by their run key) until the DAG run
    ends; its state."""
    run_path = f"/api/v2/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
    told = set()
    while True:
        stack.check_alive()
        run = stack.call("GET", run_path, token)
        state = run.json().get("state") if run.status == 200 else None
        for ti in sorted(task_instances(stack, token, run_path), key=lambda ti: ti.get("end_date") or ""):
            said = (ti["task_id"], ti["map_index"], ti["try_number"], ti["state"])
            if ti["state"] not in ENDED or said in told:
                continue
            told.add(said)
            duration = f" ({ti['duration']:.1f} s)" if ti.get("duration") is not None else ""
            if ti["map_index"] >= 0 and ti["task_id"].endswith(".run_variant"):
                print(f"mxbench: run {ti.get('rendered_map_index') or ti['map_index']}: {ti['state']}{duration}",
                      flush=True)
            else:
                print(f"mxbench: task {ti['task_id']}: {ti['state']}{duration}", flush=True)
        if state in ("success", "failed"):
            return state
        time.sleep(POLL_S)


def report_sections(report_md: Path) -> str:
    """The report from its first section through "Launcher speed ratio" (else through "Results")."""
    sections, current = [], None
    for line in report_md.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = [line]
            sections.append(current)
        elif current is not None:
            current.append(line)
    titles = [s[0][3:].strip() for s in sections]
    last = next((titles.index(t) for t in ("Launcher speed ratio", "Results") if t in titles), len(sections) - 1)
    return "\n".join(line for section in sections[:last + 1] for line in section).rstrip()


def interrupted(signum, frame):
    raise KeyboardInterrupt  # a SIGTERM stops the stack as Ctrl-C does


def main(conf_json: str) -> int:
    from mxbench import config

    signal.signal(signal.SIGTERM, interrupted)
    conf = json.loads(conf_json)
    home = Path(os.environ["AIRFLOW_HOME"])
    stack = demo_stack(home)
    print(f"mxbench: starting Airflow (api-server, dag-processor, scheduler) on {stack.url} (logs: {stack.logs})",
          flush=True)
    state = None
    try:
        started = time.monotonic()
        token = start(stack)
        print(f"mxbench: Airflow is up ({time.monotonic() - started:.0f} s); triggering {DAG_ID} with "
              f"{json.dumps(conf)}", flush=True)
        run_id = trigger(stack, token, conf)
        print(f"mxbench: DAG run {run_id}: each run as it ends", flush=True)
        state = follow(stack, token, run_id)
        print(f"mxbench: DAG run {run_id} finished: {state}")
        if state != "success":
            print(f"mxbench: the tasks' logs are under {home / 'logs' / f'dag_id={DAG_ID}'}", file=sys.stderr)
        report = config.dag_run_dir(DAG_ID, run_id) / "report"
        if (report / "report.md").is_file():
            print(report_sections(report / "report.md"))
            print(f"mxbench: report: {report}/report.html (also report.md, CSV tables and PNG plots there)")
        quoted = urllib.parse.quote(run_id, safe="")
        print(f"mxbench: in the Airflow UI: {stack.url}/dags/{DAG_ID}/runs/{quoted}/plugin/benchmark-report "
              f"(the DAG run's Benchmark report tab; user admin, password in {stack.passwords_file})")
        if os.environ.get("MXBENCH_DEMO_KEEP_UI") == "1":
            print("mxbench: MXBENCH_DEMO_KEEP_UI=1: Airflow stays up until Ctrl-C", flush=True)
            while True:
                stack.check_alive()
                time.sleep(5)
    except KeyboardInterrupt:
        print("\nmxbench: interrupted", flush=True)
    except StackError as error:
        print(f"mxbench: {error}", file=sys.stderr)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the stopping short
            signal.signal(signum, signal.SIG_IGN)
        left = stack.stop()
        if left:
            print(f"mxbench: these processes of the Airflow stack outlived it: {left}", file=sys.stderr)
            state = None
        else:
            print("mxbench: Airflow stopped", flush=True)
    return 0 if state == "success" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
