"""A DAG run's folder: its layout, told once here (``DagRunFolder``, ``RunFolder``), and reading
and writing its files: JSON records (written atomically), CSV tables and checksums. Shared by the
stages, the launchers, the artifact store, the results store and the report; none of them spells a
file name of the folder (``tests/orchestration/test_run_folder.py`` checks)."""
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mxbench_train import json_input, run_files

if TYPE_CHECKING:
    import pandas as pd

CHUNK = 1 << 20


@dataclass(frozen=True)
class RunFolder:
    """One run's folder, ``<dag run>/<key>/`` (or a retried attempt's, ``attempts/<key>.<n>/``)::

        meta.json      the run task's record: attempt, machine, status, reused, build
        plan.json      the roles the launcher planned (``launchers.base.write_plan``)
        pids.json      the local launcher's processes; remote.json: the ssh launcher's remote folders
        metrics.json   what the parse stage read of the logs, with the run's environment
        notices.json   the parse stage's notices (warnings in the logs)
        local.json     the launcher's step times: local.json, ssh.json or kubernetes.json
        rank*.log      the workers' logs (local, ssh), else roles/worker-*.log (kubernetes)
        roles/         a kubernetes run's pods' logs, one per role
        gpu-rank*.csv  telemetry, where the hosts have GPUs

    ``meta``, ``plan``, ``pids`` and ``remote`` are this worker's own (``launchers.base.LOCAL_ONLY``)."""
    path: Path

    META = "meta.json"
    PLAN = "plan.json"
    PIDS = run_files.PIDS
    REMOTE = "remote.json"
    METRICS = "metrics.json"
    NOTICES = "notices.json"
    FILES = (META, PLAN, PIDS, REMOTE, METRICS, NOTICES)
    STEP_TIMES = {"local": "local.json", "ssh": "ssh.json", "kubernetes": "kubernetes.json"}  # by launcher
    ROLES = run_files.ROLES  # the trainer's own files, named in mxbench_train.run_files
    WORKER_LOGS = run_files.WORKER_LOGS
    GPU_TELEMETRY = run_files.GPU_TELEMETRY

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @property
    def meta(self) -> Path:
        return self.path / self.META

    @property
    def plan(self) -> Path:
        return self.path / self.PLAN

    @property
    def pids(self) -> Path:
        return self.path / self.PIDS

    @property
    def remote(self) -> Path:
        return self.path / self.REMOTE

    @property
    def metrics(self) -> Path:
        return self.path / self.METRICS

    @property
    def notices(self) -> Path:
        return self.path / self.NOTICES

    def step_times(self, launcher: str) -> Path:
        """The launcher's step times (``launchers.base.StepTimes``)."""
        return self.path / self.STEP_TIMES[launcher]

    @property
    def roles(self) -> Path:
        return self.path / self.ROLES

    def role_logs(self) -> list:
        """Every role's log of a kubernetes run, ``roles/*.log``."""
        return sorted(self.roles.glob("*.log"))

    def gpu_telemetry(self) -> list:
        return sorted(self.path.glob(self.GPU_TELEMETRY))

    def logs(self) -> list:
        """The workers' logs: ``rank*.log`` (local, ssh), else its pods' ``roles/worker-*.log``."""
        return sorted(self.path.glob(self.WORKER_LOGS)) or sorted(self.roles.glob("worker-*.log"))


@dataclass(frozen=True)
class DagRunFolder:
    """A DAG run's folder, ``$MXBENCH_HOME/runs/<dag run>/``, the bus every stage rides::

        request.json   params, the expanded runs and the build asked for (``pipeline.expand``)
        data.json      the prepared data set (``pipeline.prepare``)
        stages.json    the stages that failed, and why (``stages.dag_run_failures``)
        stored.json    what the store task recorded in the results database
        <key>/         one folder per run (``RunFolder``)
        attempts/      earlier attempts of a run, moved aside: ``attempts/<key>.<n>/`` (``stages.run_stage``)
        tables/        tidy tables, ``tables/<name>.csv`` (runs, speed, epochs, summary, ratios, k8s_gap,
                       aa_noise, convergence, regression, history, since_last) and ``tables/bisect.json``
        report/        the report (``mxbench.report``)

    Each stage reads what the earlier ones wrote, so any stage can be rerun, and ``mxbench report``
    rebuilds the tables and report from files. The artifact store publishes the same layout
    (``mxbench.artifacts``)."""
    path: Path

    REQUEST = "request.json"
    DATA = "data.json"
    STAGES = "stages.json"
    STORED = "stored.json"
    TABLES = "tables"
    REPORT = "report"
    ATTEMPTS = "attempts"
    FILES = (REQUEST, DATA, STAGES, STORED)  # one object each, replaced whole
    BISECT = "bisect.json"  # in tables/
    REPORT_MARKDOWN = "report.md"  # in report/, with report.html
    REPORT_HTML = "report.html"

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @property
    def request(self) -> Path:
        return self.path / self.REQUEST

    @property
    def data(self) -> Path:
        return self.path / self.DATA

    @property
    def stages(self) -> Path:
        return self.path / self.STAGES

    @property
    def stored(self) -> Path:
        return self.path / self.STORED

    @property
    def tables(self) -> Path:
        return self.path / self.TABLES

    def table(self, name: str) -> Path:
        """``tables/<name>.csv``."""
        return self.tables / f"{name}.csv"

    @property
    def bisect(self) -> Path:
        return self.tables / self.BISECT

    @property
    def report(self) -> Path:
        return self.path / self.REPORT

    @property
    def report_markdown(self) -> Path:
        return self.report / self.REPORT_MARKDOWN

    @property
    def report_html(self) -> Path:
        return self.report / self.REPORT_HTML

    def run(self, key) -> RunFolder:
        return RunFolder(self.path / str(key))

    @property
    def attempts(self) -> Path:
        return self.path / self.ATTEMPTS

    def earlier_attempts(self, key) -> list:
        """Run ``key``'s folders moved aside by later attempts, ``attempts/<key>.<n>``."""
        return sorted(self.attempts.glob(f"{key}.*"))


def write_atomically(path: Path, write) -> None:
    """``write(tmp)`` to a temporary file in ``path``'s folder, then rename it to ``path``: tasks,
    the UI and other workers read these files while a task may be rewriting them, and a reader
    must see the old file or the new one, never a half-written one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: Path, data) -> None:
    """Write atomically (``write_atomically``), making the folder first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, sort_keys=True, default=str)
    write_atomically(path, lambda tmp: tmp.write_text(text))


def read_json(path: Path, default=None):
    """The file's JSON, or ``default`` when it is missing or unreadable."""
    try:
        return json_input.loads(Path(path).read_text())
    except (OSError, ValueError):
        return default


def load_table(path: Path) -> "pd.DataFrame":
    """A CSV table; an empty frame when the file is missing or empty."""
    import pandas as pd  # here: launchers and the artifact store use this module, and need no pandas

    try:
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return pd.DataFrame()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()
