"""The demo's Airflow: runs one DAG run of mxbench_benchmark through a real Airflow stack and
prints it as it goes. scripts/demo.sh calls it, after sourcing scripts/airflow-env.sh and
exporting the AIRFLOW_CONN_* connections (the scheduler and its task processes inherit them).

    .venv/airflow/bin/python scripts/demo_stack.py '<conf JSON>'

Why the real scheduler and not ``airflow dags test``: the scheduler queues the mapped run task's
instances in map-index order, which is the order ``expand_runs`` emits (counterbalanced rounds:
a b, b a, ...), and the one-slot pool runs them one at a time; ``dags test`` runs them in the
iteration order of a Python set, which leaves each launcher's repeats in a block.

The stack: api-server (one worker), dag-processor and scheduler (LocalExecutor, the SQLite
metadata DB under $AIRFLOW_HOME), on 127.0.0.1 and a free port; the simple auth manager with
one user, admin, whose password is in a 0600 file. The DAG run is triggered through the REST
API; each run is printed as it ends, then the report's tables and its address in the UI. The
stack is stopped at the end (MXBENCH_DEMO_KEEP_UI=1: on Ctrl-C instead), process groups and
every process they started, and anything left is named.
"""
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from mxbench_train.localhost import descendants, free_port, is_running, start_ticks

DAG_ID = "mxbench_benchmark"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
PROCESSES = {"api-server": ["api-server", "--workers", "1"], "dag-processor": ["dag-processor"],
             "scheduler": ["scheduler"]}
START_DEADLINE_S = 300  # api-server answering, then the DAG parsed: about a minute on 2 busy cores
POLL_S = 3  # each poll is a request the api-server answers while a run trains: not too often
ENDED = ("success", "failed", "skipped", "upstream_failed", "removed", "up_for_retry")


class StackError(RuntimeError):
    pass


class Stack:
    def __init__(self, home: Path):
        self.logs = home / "logs" / "stack"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.url = f"http://127.0.0.1:{free_port()}"
        self.passwords_file = home / "demo-passwords.json"
        self.password = admin_password(self.passwords_file)
        self.env = {
            **os.environ, "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": self.url.rsplit(":", 1)[1],
            "AIRFLOW__API__BASE_URL": self.url, "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),  # the scheduler's log server
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),  # the scheduler signs, the api-server checks
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords_file),
            # the DAG files do not change during a demo: parse them once, not every 30 s while runs train
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
        }
        self.procs = {}
        self.token = None

    def start(self):
        # the scheduler only once the api-server answers: its task processes call the execution API
        # at once, and would time out while the api-server is still loading
        for name in ("api-server", "dag-processor"):
            self._spawn(name)
        self.wait_for(lambda: self.call("GET", "/api/v2/monitor/health").status == 200, "the api-server to answer")
        self._spawn("scheduler")
        answer = self.call("POST", "/auth/token", {"username": "admin", "password": self.password})
        if answer.status not in (200, 201):
            raise StackError(f"admin could not log in: {answer.status} {answer.text[:300]}")
        self.token = answer.json()["access_token"]
        self.wait_for(lambda: self.call("GET", f"/api/v2/dags/{DAG_ID}").status == 200,
                      f"the dag-processor to parse {DAG_ID}", self._import_errors)

    def _spawn(self, name: str):
        with open(self.logs / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen([AIRFLOW, *PROCESSES[name]], env=self.env, stdin=subprocess.DEVNULL,
                                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _import_errors(self) -> str:
        errors = self.call("GET", "/api/v2/importErrors").json().get("import_errors", [])
        return "; ".join(f"{e['filename']}: {e['stack_trace'].strip().splitlines()[-1]}" for e in errors)

    def wait_for(self, condition, what: str, explain=None, deadline_s: float = START_DEADLINE_S):
        end = time.monotonic() + deadline_s
        while not condition():
            self.check_alive()
            if time.monotonic() > end:
                extra = explain() if explain else ""
                raise StackError(f"timed out after {deadline_s} s waiting for {what}{'; ' + extra if extra else ''} "
                                 f"(logs: {self.logs})")
            time.sleep(1)

    def check_alive(self):
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.logs / f"{name}.log").read_text(errors="replace")[-1500:]
                raise StackError(f"the {name} ended (exit {proc.returncode}); its log, {self.logs / name}.log, "
                                 f"ends:\n{tail}")

    def call(self, method: str, path: str, body=None):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(self.url + path, data=None if body is None else json.dumps(body).encode(),
                                         headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return Answer(answer.status, answer.read())
        except urllib.error.HTTPError as error:
            return Answer(error.code, error.read())
        except OSError as error:  # not listening yet, or too busy to answer in time
            return Answer(0, str(error).encode())

    def stop(self) -> list:
        """SIGTERM each process group, then SIGKILL whatever the stack started that still lives
        (task processes run in process groups of their own); the pids that outlived that."""
        started = {}
        for proc in self.procs.values():
            for pid in [proc.pid, *descendants(proc.pid)]:
                started[pid] = start_ticks(pid)
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        end = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for pid, ticks in started.items():
            if ticks is not None and is_running(pid, ticks):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        time.sleep(0.5)
        return [pid for pid, ticks in started.items() if ticks is not None and is_running(pid, ticks)]


class Answer:
    def __init__(self, status: int, body: bytes):
        self.status, self.body = status, body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)


def admin_password(path: Path) -> str:
    """admin's password: the one in ``path`` from an earlier demo, else a new one written there,
    readable by this user only."""
    if path.exists():
        known = json.loads(path.read_text() or "{}").get("admin")
        if known:
            return known
    password = secrets.token_urlsafe(12)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"admin": password}) + "\n")
    return password


def trigger(stack: Stack, conf: dict) -> str:
    paused = stack.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    if paused.status != 200:
        raise StackError(f"could not unpause {DAG_ID}: {paused.status} {paused.text[:300]}")
    answer = stack.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": conf})
    if answer.status != 200:
        raise StackError(f"the DAG run was refused: {answer.status} {answer.text[:1000]}")
    return answer.json()["dag_run_id"]


def task_instances(stack: Stack, run_path: str) -> list:
    found, offset = [], 0
    while True:
        page = stack.call("GET", f"{run_path}/taskInstances?limit=100&offset={offset}")
        if page.status != 200:
            return found
        body = page.json()
        found += body["task_instances"]
        offset += len(body["task_instances"])
        if not body["task_instances"] or offset >= body["total_entries"]:
            return found


def follow(stack: Stack, run_id: str) -> str:
    """Print each task instance as it ends (the mapped runs by their run key) until the DAG run
    ends; its state."""
    run_path = f"/api/v2/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
    told = set()
    while True:
        stack.check_alive()
        run = stack.call("GET", run_path)
        state = run.json().get("state") if run.status == 200 else None
        for ti in sorted(task_instances(stack, run_path), key=lambda ti: ti.get("end_date") or ""):
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
    stack = Stack(home)
    print(f"mxbench: starting Airflow (api-server, dag-processor, scheduler) on {stack.url} (logs: {stack.logs})",
          flush=True)
    state = None
    try:
        started = time.monotonic()
        stack.start()
        print(f"mxbench: Airflow is up ({time.monotonic() - started:.0f} s); triggering {DAG_ID} with "
              f"{json.dumps(conf)}", flush=True)
        run_id = trigger(stack, conf)
        print(f"mxbench: DAG run {run_id}: each run as it ends", flush=True)
        state = follow(stack, run_id)
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
