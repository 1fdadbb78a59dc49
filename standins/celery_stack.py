"""A real multi-worker Airflow 3 stack for tests: api-server, dag-processor and scheduler on the
CeleryExecutor, and two ``airflow celery worker`` processes that share no disk, the way a
deployment with several worker machines runs mxbench.

What is real: Airflow's own processes and executor, Celery over a real Redis broker (Debian's
``redis-server``), PostgreSQL as the metadata DB, the Celery result backend and mxbench's results
store, moto's S3 server as the artifact store (``MXBENCH_ARTIFACTS=s3://mxbench_artifacts@...``),
task heartbeats and the scheduler's detection of a worker that stopped sending them.

What is simplified: every "machine" is this one. Each process has an MXBENCH_HOME (and an
AIRFLOW_HOME) of its own, so nothing is shared through a folder, and each worker its own task log
folder, log server port and Airflow hostname (``standins.worker_hostname``); but the workers'
hostnames do not resolve, and the api-server knows one log server port, so the UI cannot fetch a
worker's task logs. "A machine dies" is ``kill_worker``: SIGKILL to the worker's whole process
tree at once. Heartbeat timeouts and retry delays are seconds, not minutes, to fit a test.

Built on ``standins.airflow_stack.AirflowStack`` (its HTTP, token and CLI helpers), with the S3
server (``standins.s3_server``) beside it; the tests and ``benchmarks/artifacts_overhead.py`` use it."""
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

from mxbench_train.localhost import descendants, free_port, is_running
from standins import postgres
from standins.airflow_stack import AIRFLOW, PROCESSES, AirflowStack
from standins.s3_server import S3Server

REDIS_SERVER = "/usr/bin/redis-server"
ARTIFACTS_CONN = "mxbench_artifacts"
WORKERS = ("worker-a", "worker-b")
# "a worker's machine died" must be noticed in seconds: no heartbeat for this long fails the try
HEARTBEAT_TIMEOUT_S = 20
FAST_FAILOVER = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_S),
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
    # a deployment's retry, so that a lost worker's task runs again elsewhere; without the default
    # 5-minute wait before it
    "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": "1",
    "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "2",
}

# module -> what needs it
PREFLIGHT = {
    "asyncpg": "asyncpg (Airflow 3's async driver for a PostgreSQL metadata DB)",
    "airflow.providers.celery.executors.celery_executor_utils": "the Celery executor (with this celery release)",
}


class Redis:
    """Debian's redis-server on a free loopback port, no persistence; stopped by ``stop``."""

    def __init__(self, folder: Path):
        if not os.access(REDIS_SERVER, os.X_OK):
            raise RuntimeError(f"no {REDIS_SERVER}: install redis-server (Debian package redis-server)")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = self.folder / "redis.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
                 "--dir", str(self.folder), "--daemonize", "no"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + 30
        while not self.ping():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise RuntimeError(f"redis-server did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)

    def ping(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class CeleryStack(AirflowStack):
    """``postgres_url``: any database on a PostgreSQL server this stack may create databases on
    (conftest's ``postgres_url``); the stack makes its own metadata and results databases there.
    ``env``: more environment for every process (ssh connections, say)."""

    def __init__(self, home: Path, postgres_url: str, env=None, workers=WORKERS, concurrency: int = 2):
        import sqlalchemy as sa

        home = Path(home)
        server = sa.engine.make_url(postgres_url)
        suffix = secrets.token_hex(4)  # two stacks in one test session never share a database
        self.admin_url = server.set(database="postgres")
        self.metadata_url = server.set(database=f"airflow_{suffix}")
        self.results_url = server.set(database=f"results_{suffix}")
        self.bucket = "mxbench-artifacts"
        self.artifacts = f"s3://{ARTIFACTS_CONN}@{self.bucket}/mxbench"
        self.worker_names = tuple(workers)
        self.concurrency = concurrency
        self.redis = self.s3 = None
        self.names = {}  # pid -> process name
        self.killed = set()  # names of workers killed on purpose
        metadata = self.metadata_url.render_as_string(hide_password=False)
        super().__init__(home, env={
            "MXBENCH_HOME": str(home / "cli" / "mxbench"),  # the test's own CLI calls
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata,
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + metadata,
            "MXBENCH_RESULTS_URL": self.results_url.render_as_string(hide_password=False),
            "MXBENCH_ARTIFACTS": self.artifacts,
            **FAST_FAILOVER, **(env or {})})
        # every process its own homes, as on machines of their own; workers their own task logs,
        # log server and Airflow hostname
        self.process_env = {}
        for name in ("api-server", "dag-processor", "scheduler", *self.worker_names):
            self.process_env[name] = {"MXBENCH_HOME": str(self.home_of(name)),
                                      "AIRFLOW_HOME": str(home / name / "airflow")}
        for name in self.worker_names:
            self.process_env[name].update({
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / name / "task-logs"),
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "standins.worker_hostname.hostname",
                "MXBENCH_TEST_HOSTNAME": name,
                "PYTHONPATH": self.env.get("PYTHONPATH", ""),
            })

    def home_of(self, name: str) -> Path:
        """The MXBENCH_HOME of process ``name`` (a worker's or a server's)."""
        return self.home / name / "mxbench"

    # --- servers, databases, processes --------------------------------------------------------

    def prepare(self):
        """Redis, the S3 server and its bucket, the two databases; then the metadata DB migrated,
        the pools made and the DAGs serialized (``AirflowStack.prepare``)."""
        self.preflight()
        self.redis = Redis(self.home / "redis")
        self.s3 = S3Server(self.logs / "s3.log")
        self.s3.create_bucket(self.bucket)
        self.env.update({"AIRFLOW__CELERY__BROKER_URL": self.redis.url, **self.s3.connection(ARTIFACTS_CONN)})
        for url in (self.metadata_url, self.results_url):
            postgres.create_database(self.admin_url, url.database)
        super().prepare()

    def preflight(self):
        """What every process of the stack imports, checked first in its environment: otherwise a
        missing driver shows as a worker that ended, its cause far up in its log."""
        python = str(Path(AIRFLOW).with_name("python"))
        for module, what in PREFLIGHT.items():
            done = subprocess.run([python, "-c", f"import {module}"], env=self.env, capture_output=True, text=True,
                                  timeout=120)
            if done.returncode != 0:
                cause = next((line for line in reversed(done.stderr.splitlines()) if "Error" in line),
                             done.stderr[-500:])
                raise RuntimeError(f"{what} cannot be imported ({cause.strip()}): check requirements.txt "
                                   "and rerun scripts/setup.sh --tests")

    def start(self, processes=None):
        """api-server (answering), dag-processor, scheduler, then the workers, each ready."""
        names = list(processes or (*PROCESSES, *self.worker_names))
        super().start(names)
        for name in names:
            if name in self.worker_names:
                self.wait_for(lambda name=name: b" ready." in (self.logs / f"{name}.log").read_bytes(), 120,
                              f"celery worker {name}", every=1)

    def _spawn(self, name: str):
        if name in self.worker_names:
            folder = self.home / name
            argv = [AIRFLOW, "celery", "worker", "--celery-hostname", f"{name}@mxbench-test",
                    "--concurrency", str(self.concurrency), "--pid", str(folder / "worker.pid")]
        else:
            argv = [AIRFLOW, *PROCESSES[name]]
        env = {**self.env, **self.process_env.get(name, {})}
        Path(env["MXBENCH_HOME"]).mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs.append(proc)
        self.names[proc.pid] = name

    def process(self, name: str) -> subprocess.Popen:
        return next(p for p in self.procs if self.names[p.pid] == name)

    def ended(self) -> list:
        """As AirflowStack's (what its ``wait_for`` and ``check_alive`` check), by this stack's process
        names; a worker killed on purpose is not one."""
        return [self.names[p.pid] for p in self.procs if p.poll() is not None and self.names[p.pid] not in self.killed]

    def kill_worker(self, name: str) -> list:
        """Worker ``name``'s machine dies: SIGKILL to the worker and everything below it at once,
        with no chance to publish or say goodbye. The tree is frozen (SIGSTOP) until no new process
        appears, so nothing forked meanwhile escapes. Returns the pids killed, all gone."""
        proc = self.process(name)
        frozen = set()
        while True:
            tree = {proc.pid, *descendants(proc.pid)} - frozen
            if not tree:
                break
            for pid in tree:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
            frozen |= tree
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.killed.add(name)
        proc.wait(timeout=30)
        end = time.monotonic() + 30
        while any(is_running(pid) for pid in frozen) and time.monotonic() < end:
            time.sleep(0.2)
        left = [pid for pid in frozen if is_running(pid)]
        assert not left, f"processes of worker {name} outlived SIGKILL: {left}"
        return sorted(frozen)

    def stop(self) -> list:
        """The Airflow processes (``AirflowStack.stop``), then Redis and the S3 server; the pids
        still alive after, the workers' descendants included."""
        tracked = {pid for p in self.procs if p.poll() is None for pid in descendants(p.pid)}
        left = super().stop()
        for server in (self.redis, self.s3):
            if server is not None:
                server.stop()
        end = time.monotonic() + 10
        while any(is_running(pid) for pid in tracked) and time.monotonic() < end:
            time.sleep(0.2)
        return left + sorted(pid for pid in tracked if is_running(pid))

    # --- the artifact store, as a test reads it ----------------------------------------------------

    def keys(self, prefix: str = "") -> list:
        """Store keys under ``mxbench/<prefix>``, relative to ``mxbench/``."""
        return [k[len("mxbench/"):] for k in self.s3.keys(self.bucket, f"mxbench/{prefix}")]

    def artifact(self, rel: str) -> bytes:
        """One object of the store, read as any S3 client would (boto3, signed)."""
        import boto3

        from standins.s3_server import ACCESS_KEY, SECRET_KEY

        client = boto3.client("s3", endpoint_url=self.s3.endpoint, aws_access_key_id=ACCESS_KEY,
                              aws_secret_access_key=SECRET_KEY, region_name="us-east-1")
        return client.get_object(Bucket=self.bucket, Key=f"mxbench/{rel}")["Body"].read()
