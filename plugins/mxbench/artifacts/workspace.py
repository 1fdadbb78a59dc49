"""A DAG run's folder for one task: with the default store the folder itself, otherwise a
scratch folder fetched from the artifact store and published back when the task ends (``dag_run``;
``run_folder`` for a run task), and what a task killed on this worker left behind."""
from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import uuid
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence

from mxbench import config
from mxbench.artifacts.object_store import Store, files_under
from mxbench.run_folder import DagRunFolder, RunFolder, sha256_of
from mxbench_train import json_input
from mxbench_train.errors import MxbenchError
from mxbench_train.redaction import redact

DAG_FILES = DagRunFolder.FILES


def run_units(files: Iterable[str]) -> Dict[str, List[str]]:
    """A DAG run folder's files by unit: run keys (``<key>/...``, ``attempts/<key>.<n>/...``),
    ``report``, and ``""`` for the DAG run's own files (request.json, tables/...)."""
    units: Dict[str, List[str]] = {}
    for rel in files:
        parts = rel.split("/")
        if len(parts) == 1 or parts[0] in (DagRunFolder.TABLES, "manifests"):
            unit = ""
        elif parts[0] == DagRunFolder.REPORT:
            unit = "report"
        elif parts[0] == DagRunFolder.ATTEMPTS:
            unit = parts[1].rsplit(".", 1)[0]
        else:
            unit = parts[0]
        units.setdefault(unit, []).append(rel)
    return units


class Workspace:
    """A DAG run's folder as one task sees it (``path``), and what it fetched (``fetched``:
    relative path -> sha256), so that ``publish`` sends only what the task wrote."""

    def __init__(self, store: Store, name: str, path: Path):
        self.store, self.name, self.path = store, name, Path(path)
        self.folder = f"runs/{name}"
        self.fetched: Dict[str, str] = {}
        self.partial_units: set = set()  # fetched in part (only some files): publishing keeps the rest

    def fetch_dag_files(self, tables: bool = False) -> None:
        names = list(DAG_FILES)
        if tables:  # a table is one object, replaced whole: its names are the files that exist
            try:
                tables = DagRunFolder.TABLES
                listed = self.store.fs.ls(self.store._path(f"{self.folder}/{tables}"), detail=False)
                names += [f"{tables}/{Path(p).name}" for p in listed]
            except FileNotFoundError:
                pass
        present = [rel for rel in names if self.store.fs.exists(self.store._path(f"{self.folder}/{rel}"))]
        self.store.get([(f"{self.folder}/{rel}", self.path / rel) for rel in present])
        self.fetched.update({rel: sha256_of(self.path / rel) for rel in present})

    def fetch_unit(self, unit: str, only: Optional[Iterable[str]] = None) -> Optional[dict]:
        manifest = self.store.fetch(self.folder, self.path, unit, only)
        if manifest is not None:
            names = set(only) if only is not None else None
            self.fetched.update({rel: e["sha256"] for rel, e in manifest["files"].items()
                                 if names is None or Path(rel).name in names})
            if only is not None:
                self.partial_units.add(unit)
        return manifest

    def publish(self, extra: Optional[Dict[str, dict]] = None) -> List[str]:
        """Send what this task wrote: the DAG run's own files one by one, each changed unit with
        its manifest. A unit fetched whole, or not at all (made or rewritten here: a run, the
        report), is replaced by what is here; one fetched in part keeps the files it had. A run
        whose manifest says a later try published it is left alone (this try is stale: a worker
        that came back after its task was given up). Returns the units published."""
        units = run_units(files_under(self.path))
        changed = {unit: [rel for rel in files if self.fetched.get(rel) != sha256_of(self.path / rel)]
                   for unit, files in units.items()}
        own = changed.pop("", [])
        self.store.put([(self.path / rel, f"{self.folder}/{rel}") for rel in own])
        published = []
        for unit, files in changed.items():
            if not files:
                continue
            ours = (extra or {}).get(unit) or {}
            old = self.store.manifest(self.folder, unit) or {"files": {}}
            if (old.get("try_number") or 0) > (ours.get("try_number") or old.get("try_number") or 0):
                raise MxbenchError(f"run {unit}: try {old['try_number']} (on {old.get('worker')}) published it "
                                   f"after this try {ours['try_number']} began: this try is stale and publishes "
                                   "nothing")
            keep = {}
            if unit in self.partial_units:
                keep = {rel: entry for rel, entry in old["files"].items() if rel not in units[unit]}
            self.store.publish(self.folder, self.path, unit, units[unit], ours, keep=keep, old=old)
            published.append(unit)
        return published

    @contextlib.contextmanager
    def publishing(self, every_s: float, extra: Optional[Dict[str, dict]] = None) -> Iterator[None]:
        """Publish what changed every ``every_s`` seconds while the block runs (a failed publish is
        printed; the next one tries again); stopped, and joined, before the block's end."""
        import threading

        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(every_s):
                try:
                    self.publish(extra)
                except Exception as exc:  # a file the run was replacing, a slow store: next time
                    print(f"mxbench: publishing progress to {self.store.shown}: {type(exc).__name__}: "
                          f"{redact(str(exc))}")

        thread = threading.Thread(target=loop, name="mxbench-publish", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def dag_run_name(dag_id: str, run_id: str) -> str:
    return config.dag_run_dir(dag_id, run_id).name


@contextlib.contextmanager
def dag_run(dag_id: str, run_id: str, task: str, *, units: Sequence[str] = (), all_units: bool = False,
            unit_files: Optional[Sequence[str]] = None, tables: bool = False, report_files: Sequence[str] = (),
            store: Optional[Store] = None) -> Iterator[DagRunFolder]:
    """The DAG run's folder for one task on this worker. With the default store, the folder itself
    (``config.existing_dag_run_dir``). Otherwise a scratch folder: the DAG run's own files (and
    ``tables``), the units ``units`` (or every run's, ``all_units``; only the files named
    ``unit_files`` of each, if given) and ``report_files`` fetched into it; what the task wrote
    published when it ends, failed or not; the scratch folder removed once published (a run
    task's scratch stays when its publish fails: nothing is lost)."""
    store = store or Store()
    if store.is_home:
        yield DagRunFolder(config.existing_dag_run_dir(dag_id, run_id))
        return
    name = dag_run_name(dag_id, run_id)
    # named as the DAG run's own folder: the report's title and messages name it
    scratch = config.home() / "scratch" / f"{task}-{uuid.uuid4().hex[:8]}" / name
    scratch.mkdir(parents=True)
    space = Workspace(store, name, scratch)
    try:
        space.fetch_dag_files(tables=tables)
        keys = list(units)
        if all_units:
            request_file = DagRunFolder(scratch).request
            request = json_input.loads(request_file.read_text()) if request_file.is_file() else {}
            keys = [run["key"] for run in request.get("runs", [])]
        leftovers = [found for key in keys
                     if space.fetch_unit(key, unit_files) is None and all_units
                     and (found := leftover(store, name, key, scratch))]
        if report_files:
            space.fetch_unit("report", report_files)
    except MxbenchError:
        shutil.rmtree(scratch.parent, ignore_errors=True)
        raise
    except Exception as exc:
        shutil.rmtree(scratch.parent, ignore_errors=True)
        raise MxbenchError(f"fetching DAG run {run_id} from the artifact store {store.shown} failed: "
                           f"{type(exc).__name__}: {redact(str(exc))}") from None
    with published(space, f"DAG run {run_id}: {task}", keep=False):
        yield DagRunFolder(scratch)
    for found in leftovers:  # published now, as interrupted: nothing to find here any more
        shutil.rmtree(found.parent, ignore_errors=True)


def run_scratch(name: str, key: str) -> Path:
    """Where a run task keeps run ``key`` of DAG run ``name`` on its worker: fixed, so that a task
    killed before it could publish leaves it where a later task on this worker finds it."""
    return config.home() / "scratch" / f"run-{key}-{hashlib.sha256(name.encode()).hexdigest()[:12]}" / name


@contextlib.contextmanager
def run_folder(dag_id: str, run_id: str, key: str, extra: Optional[dict] = None,
               store: Optional[Store] = None, every_s: float = 15.0) -> Iterator["RunSpace"]:
    """The DAG run's folder for run task ``key`` (``RunSpace.folder``): with the default store, the
    folder itself. Otherwise the run's fixed scratch folder, with the run's unit (earlier
    attempts too) fetched whole; published every ``every_s`` seconds while the task runs (so that
    a retry elsewhere finds what a lost try started, and reaps it) and when it ends, succeeded or
    failed, with ``extra`` (the task's worker and try) in its manifest."""
    store = store or Store()
    if store.is_home:
        yield RunSpace(DagRunFolder(config.existing_dag_run_dir(dag_id, run_id)))
        return
    name = dag_run_name(dag_id, run_id)
    scratch = run_scratch(name, key)
    scratch.mkdir(parents=True, exist_ok=True)
    space = Workspace(store, name, scratch)
    run = RunSpace(DagRunFolder(scratch))
    extra = {key: extra or {}}
    try:
        space.fetch_dag_files()
        run.aside = _leftover_first(space, key)
        if not (scratch / key).is_dir():
            space.fetch_unit(key)
    except Exception as exc:
        raise MxbenchError(f"run {key}: fetching it from the artifact store {store.shown} failed: "
                           f"{type(exc).__name__}: {redact(str(exc))}") from None
    with published(space, f"run {key}", keep=True, extra=extra), space.publishing(every_s, extra):
        yield run


class RunSpace:
    """A run task's folder of the DAG run (``folder``), and ``aside``: what a try killed on this
    worker left there and a later try's publish superseded (to reap before the run starts)."""

    def __init__(self, folder: DagRunFolder):
        self.folder: DagRunFolder = folder
        self.aside: Optional[RunFolder] = None


def _leftover_first(space: Workspace, key: str) -> Optional[RunFolder]:
    """Settle what an earlier try on this worker left in the run's fixed scratch folder (killed
    before it could publish, or its publish failed) against what the store has. Ours is newer
    (a higher try number): it is the run's folder, and the store's is replaced by it (its older
    try failed, or ours would have been reused). The store's is newer or the same: ours is put
    aside as an attempt (returned, to be reaped) and the store's is fetched."""
    local = DagRunFolder(space.path).run(key).meta
    manifest = space.store.manifest(space.folder, key)
    if not local.is_file() or manifest is None:
        return None
    try:
        ours = json.loads(local.read_text()).get("try_number") or 0
    except (OSError, ValueError):
        ours = 0
    if ours > (manifest.get("try_number") or 0):
        print(f"mxbench: run {key}: try {ours} on this worker did not publish; it is newer than the store's "
              f"(try {manifest.get('try_number')}) and is kept as the run's folder")
        return None
    aside = DagRunFolder(space.path).attempts / f"{key}.lost-try{ours}-{uuid.uuid4().hex[:8]}"
    aside.parent.mkdir(exist_ok=True)
    (space.path / key).replace(aside)
    print(f"mxbench: run {key}: try {ours} on this worker did not publish and try {manifest.get('try_number')} "
          f"did: ours is kept as {aside.name}")
    return RunFolder(aside)


@contextlib.contextmanager
def published(space: Workspace, what: str, keep: bool, extra=None) -> Iterator[None]:
    """Publish what the block wrote when it ends, failed or not; then remove the scratch folder.
    A publish that fails keeps a run task's folder (``keep``) and names it; when the block failed
    too, its error is the one raised (the publish's is printed)."""
    def publish() -> None:
        try:
            space.publish(extra)
        except Exception as exc:
            kept = f"; its files are kept in {space.path}" if keep else ""
            raise MxbenchError(f"{what}: publishing to the artifact store {space.store.shown} failed: "
                               f"{type(exc).__name__}: {redact(str(exc))}{kept}") from None
        shutil.rmtree(space.path.parent, ignore_errors=True)  # the scratch folder holds just this one

    try:
        try:
            yield
        except BaseException:
            try:
                publish()
            except MxbenchError as exc:
                print(f"mxbench: {exc}")
            raise
        publish()
    finally:
        if not keep:  # what a stage wrote is in the store, or its error says why not
            shutil.rmtree(space.path.parent, ignore_errors=True)


def leftover(store: Store, name: str, key: str, into: Path) -> Optional[Path]:
    """A run that was never published, as this worker's fixed scratch folder for it has it: its
    task was killed mid-run here (SIGKILL, a lost heartbeat). Copied into ``into`` so that
    parsing finds it running, reaps what it left and publishes it as interrupted."""
    found = run_scratch(name, key)
    if not DagRunFolder(found).run(key).meta.is_file():
        return None
    for rel in files_under(found):
        if run_units([rel]).get(key):
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found / rel, into / rel)
    return found
