"""A real Airflow 3 stack on this machine, for the demo (scripts/demo_stack.py), the tests and the
benchmarks: api-server, dag-processor and scheduler (LocalExecutor, the SQLite metadata DB) on a
free loopback port, with this checkout's DAGs and plugins. The Celery variant, built on this one,
is standins/celery_stack.py.

What is real: Airflow's own processes, its REST and execution APIs, the simple auth manager, the
pools scripts/airflow-init.sh makes. What is simplified: one machine, loopback only, SQLite (one
writer at a time, hence ``prepare`` before ``start``), and users log in with passwords the stack
chooses, kept in a 0600 file in its home.

    stack = AirflowStack(home)          # a scratch home: MXBENCH_HOME, AIRFLOW_HOME and logs inside
    stack.prepare()                     # metadata DB, pools, DAGs serialized
    with stack.stopped_at_end():
        stack.start()
        stack.call("GET", "/api/v2/dags", stack.token("admin"))

``stop()`` ends each process group and whatever the stack started that still lives, and returns
the pids that outlived it. Nothing here imports Airflow at module level.
"""
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from mxbench_train.localhost import descendants, free_port, is_running, start_ticks

REPO = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
CHECKOUT_SETTINGS = REPO / "config" / "airflow-checkout.env"
# name -> simple auth manager role (and, in multi-team mode, ":team|team"); "" is a user who may
# log in and read nothing
USERS = {"admin": "admin", "viewer": "viewer", "outsider": ""}
PROCESSES = {"api-server": ["api-server", "--workers", "1"], "dag-processor": ["dag-processor"],
             "scheduler": ["scheduler"]}


class StackError(RuntimeError):
    pass


def checkout_settings() -> dict:
    """This checkout's Airflow settings: DAGs and plugins folders, examples off
    (config/airflow-checkout.env, which scripts/airflow-env.sh reads too)."""
    settings = {}
    for line in CHECKOUT_SETTINGS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings[key] = str(REPO / value) if key.endswith("_FOLDER") else value
    return settings


def checkout_env(mxbench_home: Path, airflow_home: Path) -> dict:
    """MXBENCH_HOME and AIRFLOW_HOME, and this checkout's Airflow settings (``checkout_settings``)."""
    return {"MXBENCH_HOME": str(mxbench_home), "AIRFLOW_HOME": str(airflow_home), **checkout_settings()}


def server_env(port: int) -> dict:
    """The LocalExecutor and the api-server on 127.0.0.1:port, a free port for the scheduler's log
    server and one new JWT secret."""
    url = f"http://127.0.0.1:{port}"
    return {"AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),  # the scheduler's log server
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64)}  # the scheduler signs, the api-server checks


def make_pools(airflow) -> None:
    """The mxbench pools, one slot per machine set (as scripts/airflow-init.sh makes them), through
    ``airflow``, a function that runs the Airflow CLI."""
    from mxbench.matrix.variants import machine_sets

    for machines, launchers in machine_sets().items():
        airflow("pools", "set", f"mxbench_{machines}", "1",
                f"mxbench: one run at a time on the {machines} machines ({', '.join(launchers)})")


def kept_passwords(path: Path, users) -> dict:
    """{user: password}: those already in ``path`` (an earlier stack's), new ones for the others;
    all written back to ``path``, readable by this user only."""
    known = json.loads(path.read_text() or "{}") if path.exists() else {}
    passwords = {name: known.get(name) or secrets.token_urlsafe(12) for name in users}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(passwords) + "\n")
    return passwords


class Response:
    def __init__(self, status: int, body: bytes, headers):
        self.status, self.body, self.headers = status, body, headers

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)


# A scratch stack's quiet check looks once, for 1 s (the shortest bound the form takes): the check
# runs as in a real DAG run, and a busy test machine costs each run 1 s of waiting, not the
# deployment default's 60 s.
SCRATCH_QUIET_WAIT_S = 1


class AirflowStack:
    """``home``: the stack's folder. ``users``: {name: role} (USERS by default). ``env``: more
    environment for every process. ``logs``: the processes' log folder (home/logs).
    ``passwords_file``: where the users' passwords are kept (home/passwords.json). ``checkout``:
    False leaves MXBENCH_HOME, AIRFLOW_HOME, the DAG and plugin folders, the scheduler's idle
    sleep and the quiet wait (``SCRATCH_QUIET_WAIT_S``) to the calling environment (the demo's,
    from scripts/airflow-env.sh; the benchmarks').
    ``port``: the api-server's (a free one)."""

    def __init__(self, home: Path, users=None, env=None, *, logs=None, passwords_file=None, checkout=True,
                 port=None):
        self.home = Path(home)
        self.logs = Path(logs) if logs else self.home / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.users = dict(USERS if users is None else users)
        self.passwords_file = Path(passwords_file) if passwords_file else self.home / "passwords.json"
        self.passwords = kept_passwords(self.passwords_file, self.users)
        # the checkout's folders and the scheduler's idle sleep, as scripts/airflow-env.sh sets them,
        # a scratch stack's short quiet wait (a run its conf does not give one, a scheduled one), and
        # no re-parse of DAG files that do not change while it runs (as the demo's stack): every 30 s,
        # Airflow's default, it cost 0.03 of a core per idle stack, beside several stacks at once
        at_home = {**checkout_env(self.home, self.home / "airflow"),
                   "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
                   "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "3600",
                   "AIRFLOW__MXBENCH__QUIET_WAIT_S": str(SCRATCH_QUIET_WAIT_S)} if checkout else {}
        self.env = {
            **os.environ, **at_home, **server_env(port),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{n}:{r}" for n, r in self.users.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.passwords_file),
            **(env or {}),
        }
        self.procs = []

    # --- the CLI and the processes ------------------------------------------------------------

    def airflow(self, *args, timeout=600) -> str:
        done = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise StackError(f"airflow {' '.join(args)}:\n{(done.stderr or done.stdout)[-3000:]}")
        return done.stdout

    def prepare(self, template=None):
        """The metadata DB, the mxbench pools (as scripts/airflow-init.sh makes them) and the DAGs
        serialized: before the scheduler runs, as SQLite takes one writer at a time. ``template``:
        a DB file that ``migrate`` made (a scratch stack's), copied instead of migrating again."""
        if template is None:
            self.migrate()
        else:
            self.copy_db(template)
        self.airflow("dags", "reserialize")

    def migrate(self) -> None:
        """The metadata DB migrated and the mxbench pools made."""
        self.airflow("db", "migrate")
        make_pools(self.airflow)

    def copy_db(self, template) -> None:
        """``template`` (a file ``migrate`` made) as this stack's metadata DB: two Airflow CLI runs
        fewer, several seconds each on busy cores."""
        shutil.copyfile(template, self.sqlite_db())

    def sqlite_db(self) -> Path:
        """The metadata DB's file: Airflow's default, airflow.db in AIRFLOW_HOME."""
        if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in self.env:
            raise StackError("the metadata DB is not the default SQLite file: no file to copy")
        path = Path(self.env["AIRFLOW_HOME"]) / "airflow.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def start(self, processes=tuple(PROCESSES), deadline_s: float = 120):
        """Start ``processes``: the api-server and dag-processor first, the rest (the scheduler, any
        workers) once the api-server answers, within ``deadline_s``."""
        # a scheduler that finds runs to do at once (a backfill made beforehand) would otherwise
        # start tasks whose first call to the execution API times out while the api-server loads
        first = [name for name in processes if name in ("api-server", "dag-processor")]
        for name in first:
            self._spawn(name)
        if "api-server" in first:
            self.wait_for(lambda: self.call("GET", "/api/v2/monitor/health").status == 200, deadline_s,
                          "the api-server")
        for name in processes:
            if name not in first:
                self._spawn(name)

    def _spawn(self, name: str):
        with open(self.logs / f"{name}.log", "wb") as log:
            self.procs.append(subprocess.Popen([AIRFLOW, *PROCESSES[name]], env=self.env, stdin=subprocess.DEVNULL,
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def stop(self) -> list:
        """SIGTERM each process group, then SIGKILL whatever the stack started that still lives
        (task processes run in process groups of their own); the pids that outlived that."""
        started = {}
        for proc in self.procs:
            for pid in [proc.pid, *descendants(proc.pid)]:
                started[pid] = start_ticks(pid)
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        end = time.monotonic() + 30
        for proc in self.procs:
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
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # executor workers left in its group
            except ProcessLookupError:
                pass
            proc.wait()
        time.sleep(0.5)
        return [pid for pid, ticks in started.items() if ticks is not None and is_running(pid, ticks)]

    @contextlib.contextmanager
    def stopped_at_end(self):
        """For a with block that starts the stack: stops it when the block ends, however it ends, and
        asserts that none of its processes outlived it."""
        try:
            yield self
        finally:
            left = self.stop()
            assert not left, f"processes outlived the stack in {self.home}: {left}"

    def ended(self) -> list:
        """The names of the stack's processes that ended (none should while it runs)."""
        return [p.args[1] for p in self.procs if p.poll() is not None]

    def check_alive(self):
        """StackError when a process of the stack ended, with its log's last lines, which usually
        say why (a missing module, a port taken)."""
        dead = self.ended()
        if dead:
            tail = (self.logs / f"{dead[0]}.log").read_text(errors="replace")[-1500:]
            raise StackError(f"{', '.join(dead)} ended; logs in {self.logs}; {dead[0]}'s last lines:\n{tail}")

    def wait_for(self, condition, timeout: float, what: str, every: float = 2, explain=None):
        """Call condition every ``every`` seconds until it returns something true, and return that;
        StackError when a process of the stack ended or after ``timeout`` seconds (with what
        ``explain()`` says, when given)."""
        end = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            try:
                self.check_alive()
            except StackError as error:
                raise StackError(f"{what}: {error}") from None
            if time.monotonic() > end:
                extra = explain() if explain else ""
                raise StackError(f"{what}: timed out after {timeout} s{'; ' + extra if extra else ''}; "
                                 f"logs in {self.logs}")
            time.sleep(every)

    # --- HTTP ---------------------------------------------------------------------------------

    def call(self, method: str, path: str, token=None, body=None, cookie=None) -> Response:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if cookie:
            headers["Cookie"] = f"_token={cookie}"  # the UI's login cookie
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return Response(answer.status, answer.read(), answer.headers)
        except urllib.error.HTTPError as error:
            return Response(error.code, error.read(), error.headers)
        except OSError as error:  # not listening yet, or too busy to answer in time
            return Response(0, str(error).encode(), {})

    def token(self, user: str) -> str:
        answer = self.call("POST", "/auth/token", body={"username": user, "password": self.passwords[user]})
        if answer.status not in (200, 201):
            raise StackError(f"login of {user}: {answer.status} {answer.text[:300]}")
        return answer.json()["access_token"]
