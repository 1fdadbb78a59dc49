"""Reading a published DAG run: its URL in the store, its report, or all of it, downloaded."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict, Optional

from mxbench.artifacts.object_store import Store, object_of
from mxbench.artifacts.workspace import Workspace, dag_run_name
from mxbench.run_folder import DagRunFolder
from mxbench_train import json_input
from mxbench_train.errors import MxbenchError


def published_paths(paths: Dict[str, str], folder: DagRunFolder, dag_id: str, run_id: str,
                    store: Optional[Store] = None) -> Dict[str, str]:
    """``paths`` (files in a task's folder of the DAG run) as the store's URLs, for the task log
    and XCom; unchanged with the default store, whose folder is the DAG run's own."""
    base = published_folder(dag_id, run_id, store)
    if base is None:
        return paths
    return {name: f"{base}/{Path(path).relative_to(folder.path)}" for name, path in paths.items()}


def published_folder(dag_id: str, run_id: str, store: Optional[Store] = None) -> Optional[str]:
    """The DAG run's folder as the store's URL, for records that outlive a task's scratch copy;
    None with the default store (the folder is the DAG run's own)."""
    store = store or Store()
    return None if store.is_home else f"{store.shown.rstrip('/')}/runs/{dag_run_name(dag_id, run_id)}"


def read_report(dag_id: str, run_id: str, store: Optional[Store] = None) -> Optional[bytes]:
    """The published report.html of a DAG run, checked against the report's manifest; None when
    there is none yet, or the DAG run folder is another DAG's. Object storage only (the default
    store is read as a folder: ``mxbench.airflow_glue.web``)."""
    store = store or Store()
    folder = f"runs/{dag_run_name(dag_id, run_id)}"
    manifest = store.manifest(folder, "report")
    report = f"{DagRunFolder.REPORT}/{DagRunFolder.REPORT_HTML}"  # as the manifest names it
    entry = (manifest or {}).get("files", {}).get(report)
    request = store.read_json(f"{folder}/{DagRunFolder.REQUEST}") or {}
    if entry is None or request.get("dag_id") not in (None, dag_id):
        return None
    body = store.read_bytes(f"{folder}/{object_of(report, entry)}")
    if body is None or hashlib.sha256(body).hexdigest() != entry["sha256"]:
        return None  # being published again: the next request finds it whole
    return body


def download(dag_id: str, run_id: str, dest: Path, store: Optional[Store] = None) -> Path:
    """A published DAG run, whole, into ``dest/<dag run>`` (every unit as its manifest lists it): to
    read it, or to rebuild its report with ``mxbench report``. Nothing is published back."""
    store = store or Store()
    name = dag_run_name(dag_id, run_id)
    space = Workspace(store, name, Path(dest) / name)
    space.fetch_dag_files(tables=True)
    request_file = DagRunFolder(space.path).request
    request = json_input.loads(request_file.read_text()) if request_file.is_file() else None
    if request is None:
        raise MxbenchError(f"the artifact store {store.shown} has no DAG run {run_id} of {dag_id} "
                           f"(runs/{name}/request.json)")
    missing = [run["key"] for run in request.get("runs", []) if space.fetch_unit(run["key"]) is None]
    space.fetch_unit("report")
    for key in missing:
        print(f"mxbench: run {key} was never published (not run, or its task was killed before it could publish)")
    return space.path
