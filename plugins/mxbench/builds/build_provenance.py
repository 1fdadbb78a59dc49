"""Which MXNet build a run trains with, and which one it did: the build a run must use
(``build_of``) and its venv on this worker (``build_here``); the version its trainers reported
(``reported_version``, ``reported_commit``, ``ran_with``) and whether that is the build asked
for (``same_release``). ``stages.run_stage.run_one`` records them in the run's ``meta.json``. No Airflow here,
and no pandas: the run task imports this for every run."""
import re
from pathlib import Path
from typing import Optional

from mxbench.builds.record import RunBuild
from mxbench.run_folder import DagRunFolder, RunFolder, read_json
from mxbench_train.errors import MxbenchError
from mxbench_train.events import MARKER, parse_event

# the commit a version names in its local part: 1.9.1+g0123abcd, 1.9.1+g0123abcd.d20260101
_COMMIT_IN_VERSION = re.compile(r"\+(?:[0-9a-z]+\.)*g(?P<commit>[0-9a-f]{7,40})(?![0-9a-z])")
MAX_LINE = 64 * 1024  # characters read at once, as ``parse.MAX_LINE``: a longer line is no event


def build_of(run: dict, dag_folder: DagRunFolder) -> Optional[dict]:
    """The build ``run`` must train with. A run expanded before runs carried their build (a cleared
    task of an older DAG run) has only ``train_python``, its local venv: the build is request.json's."""
    if run.get("build") or not run.get("train_python"):
        return run.get("build")
    build = (read_json(dag_folder.request, {}) or {}).get("build") or {}
    return {**build, "python": run["train_python"]}


def build_here(run: dict, dag_folder: DagRunFolder) -> dict:
    """``run`` with its build's venv on this worker, for a local run: resolve_build made the one it
    names on the worker it ran on; another worker makes its own (once: ``mxnet_builds.ensure_venv``
    keeps it), from the versions manifest's entry for the same package."""
    from mxbench.builds import mxnet_builds

    build = build_of(run, dag_folder)
    python = (build or {}).get("python")
    if run["launcher"] != "local" or not python or Path(python).exists():
        return run
    entry = next((b for b in mxnet_builds.load_manifest() if b.package == build["package"]), None)
    if entry is None or list(mxnet_builds.install_spec(entry)) != list(build.get("spec") or []):
        raise MxbenchError(f"{RunBuild.from_dict(build)} has no venv on this worker ({python}), and the "
                           "versions manifest here no longer has that build: clear resolve_build")
    print(f"mxbench: making {RunBuild.from_dict(build)}'s venv on this worker (resolve_build ran on another)")
    return {**run, "build": {**build, "python": mxnet_builds.ensure_venv(entry)}}



def reported_version(run_folder: RunFolder) -> Optional[str]:
    """The MXNet version the run's trainers imported (their run_start events), whatever was
    asked for: one version, or each one they reported, joined, where hosts ran different ones."""
    return _reported(run_folder, "mxnet_version", 20)  # a host's word: the store keeps 50 characters


def reported_commit(run_folder: RunFolder) -> Optional[str]:
    """The MXNet commit the run's trainers named (``mxnet_commit``: a source build's image says
    it, ``docker/train-source.Dockerfile``), joined where they named different ones; None where
    none named one."""
    return _reported(run_folder, "mxnet_commit", 40)


def _reported(run_folder: RunFolder, field: str, keep: int) -> Optional[str]:
    values = []
    for log in run_folder.logs():
        value = _last_run_value(log, field)
        if value:
            values.append(value[:keep])
    return ", ".join(sorted(set(values))) or None


def _last_run_value(log: Path, field: str) -> Optional[str]:
    """The environment's ``field`` in the first run_start event that carries one, of the log's last
    run: as ``parse.parse_log`` reads it, a run_start of a rank the run has seen begins a new run (a
    restarted trainer appends to its log). Only the events are read, without building tables."""
    value, ranks, continues = None, set(), False
    with open(log, errors="replace") as f:
        for piece in iter(lambda: f.readline(MAX_LINE), ""):
            rest_of_line, continues = continues, not piece.endswith("\n")
            if rest_of_line or MARKER not in piece:
                continue
            event = parse_event(piece.rstrip("\r\n"))
            if event is None or event.get("event") != "run_start":
                continue
            if event.get("rank") in ranks:
                value, ranks = None, set()
            ranks.add(event.get("rank"))
            environment = event.get("environment")
            reported = environment.get(field) if isinstance(environment, dict) else None
            if value is None and reported:
                value = str(reported)
    return value


def ran_with(run_folder: RunFolder, plan) -> dict:
    """What a failed run trained with, from the records its launcher left: the version its
    trainers reported, and its image (kubernetes.json) or interpreter (the plan's workers)."""
    image = (read_json(run_folder.step_times("kubernetes"), {}) or {}).get("image")
    worker = next((r for r in plan if r.kind == "worker"), None)
    return {"reported": reported_version(run_folder), "image": image,
            "python": None if image or worker is None else worker.argv[0]}


def commit_in_version(version: str) -> Optional[str]:
    """The commit a version names in its local part (``1.9.1+g0123abcd``), else None."""
    named = _COMMIT_IN_VERSION.search(version.lower())
    return named["commit"] if named else None


def same_release(asked: str, reported: Optional[str], commit: Optional[str] = None,
                 reported_commit: Optional[str] = None, commit_required: bool = True) -> bool:
    """Whether the trainer's MXNet is the build asked for: the same release numbers (1.7.0.post2,
    a rebuilt wheel, reports itself as 1.7.0). For a build of a ``commit``, the trainer must name
    that commit, in its version (``1.9.1+g<sha>``, cut to 20 characters) or as ``reported_commit``
    (a source build's image): another commit's build of the same release, or a release that names
    none (1.9.1 for 1.9.1+g<sha>), is another MXNet. ``commit_required=False`` accepts one that
    names none: the launcher installed the commit's wheel itself, checked against its sha256."""
    from packaging.version import InvalidVersion, Version

    if not reported:
        return False
    try:
        same = Version(asked).release == Version(reported).release
    except InvalidVersion:
        same = asked == reported
    if not same or not commit:
        return same
    named = [c.strip().lower() for c in (reported_commit or "").split(",") if c.strip()]
    named += [commit_in_version(reported)] if commit_in_version(reported) else []
    if not named:
        return not commit_required
    return all(commit.startswith(c) or c.startswith(commit) for c in named)
