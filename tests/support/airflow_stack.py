"""A real Airflow 3 stack for tests: api-server, dag-processor and scheduler (LocalExecutor, the
SQLite metadata DB) in a scratch home, on a free loopback port, with this checkout's DAGs and
plugins. Users log in through the simple auth manager with passwords the stack chooses. Stopped
by process group at the end; ``stop()`` says which processes outlived it."""
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from mxbench_train.localhost import free_port, is_running

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
# name -> simple auth manager role (and, in multi-team mode, ":team|team"); "" is a user who may
# log in and read nothing
USERS = {"admin": "admin", "viewer": "viewer", "outsider": ""}
PROCESSES = {"api-server": ["api-server", "--workers", "1"], "dag-processor": ["dag-processor"],
             "scheduler": ["scheduler"]}


class Response:
    def __init__(self, status: int, body: bytes, headers):
        self.status, self.body, self.headers = status, body, headers

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)


class AirflowStack:
    def __init__(self, home: Path, users=None, env=None):
        self.home = Path(home)
        self.logs = self.home / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.users = dict(USERS if users is None else users)
        self.passwords = {name: secrets.token_urlsafe(12) for name in self.users}
        passwords_file = self.home / "passwords.json"
        passwords_file.write_text(json.dumps(self.passwords))
        self.env = {
            **os.environ, "MXBENCH_HOME": str(self.home), "AIRFLOW_HOME": str(self.home / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"), "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": str(port), "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),  # the scheduler's log server
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),  # the scheduler signs, the api-server checks
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",  # as scripts/airflow-env.sh sets it
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{n}:{r}" for n, r in self.users.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
            **(env or {}),
        }
        self.procs = []

    # --- the CLI and the processes ------------------------------------------------------------

    def airflow(self, *args, timeout=600) -> str:
        done = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)}:\n{(done.stderr or done.stdout)[-3000:]}")
        return done.stdout

    def prepare(self):
        """The metadata DB, the mxbench pools (as scripts/airflow-init.sh makes them) and the DAGs
        serialized: before the scheduler runs, as SQLite takes one writer at a time."""
        from mxbench.matrix.variants import machine_sets

        self.airflow("db", "migrate")
        for machines, launchers in machine_sets().items():
            self.airflow("pools", "set", f"mxbench_{machines}", "1",
                         f"mxbench: one run at a time on the {machines} machines ({', '.join(launchers)})")
        self.airflow("dags", "reserialize")

    def start(self, processes=tuple(PROCESSES)):
        # the api-server first, answering, then the rest: a scheduler that finds runs to do at once
        # (a backfill made beforehand) would otherwise start tasks whose first call to the
        # execution API times out while the api-server is still loading
        first = [name for name in processes if name == "api-server"]
        for name in first:
            self._spawn(name)
        if first:
            self.wait_for(lambda: self.call("GET", "/api/v2/monitor/health").status == 200, 120, "the api-server")
        for name in processes:
            if name not in first:
                self._spawn(name)

    def _spawn(self, name: str):
        with open(self.logs / f"{name}.log", "wb") as log:
            self.procs.append(subprocess.Popen([AIRFLOW, *PROCESSES[name]], env=self.env, stdin=subprocess.DEVNULL,
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def stop(self) -> list:
        """SIGTERM each process group, SIGKILL what is left of it; the pids still alive after."""
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # executor workers left in its group
            except ProcessLookupError:
                pass
            proc.wait()
        return [p.pid for p in self.procs if is_running(p.pid)]

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

    def wait_for(self, condition, timeout: float, what: str, every: float = 2):
        """Call condition every ``every`` seconds until it returns something true, and return that;
        AssertionError when a process of the stack ended (with its log's last lines, which usually
        say why: a missing module, a port taken) or after ``timeout`` seconds."""
        end = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            dead = self.ended()
            if dead:
                tail = (self.logs / f"{dead[0]}.log").read_text(errors="replace")[-1500:]
                raise AssertionError(f"{what}: {', '.join(dead)} ended; logs in {self.logs}; {dead[0]}'s last "
                                     f"lines:\n{tail}")
            if time.monotonic() > end:
                raise AssertionError(f"{what}: timed out; logs in {self.logs}")
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
        except OSError as error:  # not listening yet
            return Response(0, str(error).encode(), {})

    def token(self, user: str) -> str:
        answer = self.call("POST", "/auth/token", body={"username": user, "password": self.passwords[user]})
        assert answer.status in (200, 201), f"login of {user}: {answer.status} {answer.text}"
        return answer.json()["access_token"]
