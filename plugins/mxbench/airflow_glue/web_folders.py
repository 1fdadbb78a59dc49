"""Which files of the DAG run folders a request of the mxbench pages may reach: a report, a run's
record and logs, each resolved inside ``$MXBENCH_HOME/runs`` and its own DAG run's folder (no other
name, no ``..``, no link out). No Airflow here: the routes check the user and the DAG run first."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from mxbench import config
from mxbench.run_folder import DagRunFolder, RunFolder
from mxbench_train import json_input


def report_file(dag_id: str, run_id: str) -> Optional[Path]:
    """The report of DAG run ``run_id`` of ``dag_id`` where the pipeline writes it; None where that
    is not a file inside ``$MXBENCH_HOME/runs`` (a folder swapped for a link elsewhere, say), or the
    folder is another DAG's (run ids are unique per DAG only; folders made before request.json
    named their DAG are taken as they are)."""
    folder = dag_run_folder(dag_id, run_id)
    path = None if folder is None else folder.report_html.resolve()
    runs = (config.home() / "runs").resolve()
    return path if path is not None and runs in path.parents and path.is_file() else None


def dag_run_folder(dag_id: str, run_id: str) -> Optional[DagRunFolder]:
    """The DAG run's folder, resolved, as ``report_file`` takes it: inside ``$MXBENCH_HOME/runs``
    and not another DAG's; None otherwise."""
    runs = (config.home() / "runs").resolve()
    folder = DagRunFolder(config.existing_dag_run_dir(dag_id, run_id).resolve())
    if runs not in folder.path.parents:
        return None
    try:
        owner = json_input.loads(folder.request.read_text(encoding="utf-8")).get("dag_id")
    except (OSError, ValueError, AttributeError):
        owner = None
    return folder if owner in (None, dag_id) else None


def run_folder_of(dag_folder: DagRunFolder, key: str) -> Optional[RunFolder]:
    """The folder of run ``key`` of a DAG run, resolved: only a run its request.json lists, and
    only inside the DAG run's folder; None otherwise."""
    try:
        request = json_input.loads(dag_folder.request.read_text(encoding="utf-8"))
        keys = {run.get("key") for run in request.get("runs") or []}
    except (OSError, ValueError, AttributeError):
        return None
    if key not in keys or key in ("", ".", "..") or "/" in key or "\\" in key:
        return None
    path = dag_folder.run(key).path.resolve()
    return RunFolder(path) if dag_folder.path in path.parents and path.is_dir() else None


def run_evidence_files(run: RunFolder) -> list:
    """What ``run-file`` serves of a run (``run``: resolved), relative to its folder: its record,
    then its logs."""
    found = [run.meta] if run.meta.is_file() else []
    found += sorted(run.path.glob(RunFolder.WORKER_LOGS)) + run.role_logs()
    # a link out (never made by a launcher) is not the run's
    return [path.relative_to(run.path).as_posix() for path in found
            if run.path in path.resolve().parents and path.resolve().is_file()]


def evidence_file(run: RunFolder, name: str) -> Optional[Path]:
    """``name`` in the run's folder when it is one ``run_evidence_files`` lists (no other name, no
    ``..``, nothing that resolves outside the run's folder); None otherwise."""
    if name not in run_evidence_files(run):
        return None
    path = (run.path / name).resolve()
    return path if run.path in path.parents and path.is_file() else None
