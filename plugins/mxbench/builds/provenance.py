"""Which MXNet build a run trains with, and which one it did: the build a run must use
(``build_of``) and its venv on this worker (``build_here``); the version its trainers reported
(``reported_version``, ``ran_with``) and whether that is the release asked for
(``same_release``). ``stages.run.run_one`` records them in the run's ``meta.json``. No Airflow here,
and no pandas: the run task imports this for every run."""
import re
from pathlib import Path
from typing import Optional

from mxbench.builds.record import RunBuild
from mxbench.run_folder import DagRunFolder, RunFolder, read_json, run_logs
from mxbench_train.errors import MxbenchError
from mxbench_train.events import MARKER, parse_event

# the commit a version names in its local part: 1.9.1+g0123abcd, 1.9.1+g0123abcd.d20260101
_COMMIT_IN_VERSION = re.compile(r"\+(?:[0-9a-z]+\.)*g(?P<commit>[0-9a-f]{7,40})(?![0-9a-z])")
MAX_LINE = 64 * 1024  # characters read at once, as ``parse.MAX_LINE``: a longer line is no event


def build_of(run: dict, dag_dir: Path) -> Optional[dict]:
    """The build ``run`` must train with. A run expanded before runs carried their build (a cleared
    task of an older DAG run) has only ``train_python``, its local venv: the build is request.json's."""
    if run.get("build") or not run.get("train_python"):
        return run.get("build")
    build = (read_json(DagRunFolder(dag_dir).request, {}) or {}).get("build") or {}
    return {**build, "python": run["train_python"]}


def build_here(run: dict, dag_dir: Path) -> dict:
    """``run`` with its build's venv on this worker, for a local run: resolve_build made the one it
    names on the worker it ran on; another worker makes its own (once: ``builds.ensure_venv``
    keeps it), from the versions manifest's entry for the same package."""
    from mxbench.builds import manifest as builds

    build = build_of(run, dag_dir)
    python = (build or {}).get("python")
    if run["launcher"] != "local" or not python or Path(python).exists():
        return run
    entry = next((b for b in builds.load_manifest() if b.package == build["package"]), None)
    if entry is None or list(builds.install_spec(entry)) != list(build.get("spec") or []):
        raise MxbenchError(f"{RunBuild.from_dict(build)} has no venv on this worker ({python}), and the "
                           "versions manifest here no longer has that build: clear resolve_build")
    print(f"mxbench: making {RunBuild.from_dict(build)}'s venv on this worker (resolve_build ran on another)")
    return {**run, "build": {**build, "python": builds.ensure_venv(entry)}}



def reported_version(run_dir: Path) -> Optional[str]:
    """The MXNet version the run's trainers imported (their run_start events), whatever was
    asked for: one version, or each one they reported, joined, where hosts ran different ones."""
    versions = []
    for log in run_logs(run_dir):
        version = _last_run_version(log)
        if version:
            versions.append(version[:20])  # a host's word: the store keeps 50 characters
    return ", ".join(sorted(set(versions))) or None


def _last_run_version(log: Path) -> Optional[str]:
    """The version in the first run_start event that carries one, of the log's last run: as
    ``parse.parse_log`` reads it, a run_start of a rank the run has seen begins a new run (a
    restarted trainer appends to its log). Only the events are read, without building tables."""
    version, ranks, continues = None, set(), False
    with open(log, errors="replace") as f:
        for piece in iter(lambda: f.readline(MAX_LINE), ""):
            rest_of_line, continues = continues, not piece.endswith("\n")
            if rest_of_line or MARKER not in piece:
                continue
            event = parse_event(piece.rstrip("\r\n"))
            if event is None or event.get("event") != "run_start":
                continue
            if event.get("rank") in ranks:
                version, ranks = None, set()
            ranks.add(event.get("rank"))
            reported = (event.get("environment") or {}).get("mxnet_version")
            if version is None and reported:
                version = str(reported)
    return version


def ran_with(run_dir: Path, plan) -> dict:
    """What a failed run trained with, from the records its launcher left: the version its
    trainers reported, and its image (kubernetes.json) or interpreter (the plan's workers)."""
    image = (read_json(RunFolder(run_dir).step_times("kubernetes"), {}) or {}).get("image")
    worker = next((r for r in plan if r.kind == "worker"), None)
    return {"reported": reported_version(run_dir), "image": image,
            "python": None if image or worker is None else worker.argv[0]}


def same_release(asked: str, reported: Optional[str], commit: Optional[str] = None) -> bool:
    """Whether the trainer's MXNet is the build asked for: the same release numbers (1.7.0.post2,
    a rebuilt wheel, reports itself as 1.7.0). For a build of a ``commit``, a reported version that
    names a commit (``1.9.1+g<sha>``, cut to 20 characters) must name that one: another commit's
    build of the same release is another MXNet."""
    from packaging.version import InvalidVersion, Version

    if not reported:
        return False
    try:
        same = Version(asked).release == Version(reported).release
    except InvalidVersion:
        same = asked == reported
    named = _COMMIT_IN_VERSION.search(reported.lower())
    if same and commit and named:
        return commit.startswith(named["commit"]) or named["commit"].startswith(commit)
    return same

