"""The artifact store: where DAG runs' files and the prepared data sets are published, so that
tasks on different Airflow workers (Celery or Kubernetes executor, no shared disk) see each
other's work. One base URL, ``MXBENCH_ARTIFACTS``, read through Airflow's own object storage
(``ObjectStoragePath``, over fsspec): ``s3://<conn id>@<bucket>/<prefix>`` takes its credentials
from that Airflow connection; gs:// and abfs:// work the same way through their providers.

Layout under the base::

    runs/<dag run>/request.json, data.json, stages.json, stored.json   one object each, replaced whole
    runs/<dag run>/tables/<name>.csv                                   likewise
    runs/<dag run>/<key>/...  attempts/<key>.<n>/...                   the unit of run <key>
    runs/<dag run>/report/...                                          the unit "report"
    runs/<dag run>/manifests/<unit>.json                               a unit's manifest, written last
    data/<rec-...>/...  data/manifests/<rec-...>.json                  prepared data sets

A unit is published file by file and its manifest (files, sizes, sha256) last; a reader takes
only what a manifest lists and checks each file against it, so it never reads half a publish: no
manifest, no result yet. A retry republishes its unit: idempotent, no lock across workers.

The default, ``file://$MXBENCH_HOME``, is this machine's own folder (``Store.is_home``): tasks
work in it directly and nothing is copied or hashed, as before there was a store.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from mxbench_train.cifar10 import redact
from mxbench_train.errors import MxbenchError

from . import caches, config

SETTING = "MXBENCH_ARTIFACTS"
DAG_FILES = ("request.json", "data.json", "stages.json", "stored.json")
DATA_FILES = (".rec", ".idx", ".json")  # a prepared data set's published files (not its download)
CHUNK = 1 << 20


def base_url() -> str:
    return os.environ.get(SETTING) or f"file://{config.home()}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def listing(folder: Path, files: Iterable[str]) -> Dict[str, dict]:
    """A manifest's ``files``: relative path -> size and sha256."""
    return {rel: {"size": (folder / rel).stat().st_size, "sha256": sha256_of(folder / rel)} for rel in sorted(files)}


def _skipped(name: str) -> bool:
    # write_json's and fetch's temporary files, lock files: never published
    return name.startswith(".") or name.endswith((".tmp", ".lock"))


def files_under(folder: Path, sub: str = "") -> List[str]:
    """Every file under ``folder/sub`` (relative to ``folder``), temporary and lock files left out."""
    base = folder / sub if sub else folder
    if not base.is_dir():
        return []
    return sorted(str(p.relative_to(folder)) for p in base.rglob("*")
                  if p.is_file() and not any(_skipped(part) for part in p.relative_to(folder).parts))


class Store:
    """The artifact store at ``url`` (default: ``MXBENCH_ARTIFACTS``)."""

    def __init__(self, url: Optional[str] = None):
        from urllib.parse import urlsplit

        from airflow.sdk import ObjectStoragePath

        self.url = url or base_url()
        parts = urlsplit(self.url)
        if ":" in parts.netloc.rpartition("@")[0] or parts.query or parts.fragment:
            # never echoed: that is where a key would be
            raise MxbenchError(f"the artifact store URL ({SETTING}) carries a password, a query or a fragment: "
                               "name an Airflow connection instead, s3://<conn id>@<bucket>/<prefix>; its "
                               "credentials and options belong in that connection")
        try:
            self.root = ObjectStoragePath(self.url)
            self.fs = self.root.fs
            self.fs.invalidate_cache()  # fsspec shares instances in a process: no listing from before
        except Exception as exc:  # an unknown scheme (its provider is not installed), a missing connection
            raise MxbenchError(f"the artifact store {self.shown} ({SETTING}) cannot be opened: "
                               f"{type(exc).__name__}: {redact(str(exc))}") from None
        if self.root.conn_id:  # the provider would fall back to anonymous access without a word
            from airflow.sdk import BaseHook

            try:
                BaseHook.get_connection(self.root.conn_id)
            except Exception as exc:
                raise MxbenchError(f"the artifact store {self.shown} ({SETTING}) names the Airflow connection "
                                   f"{self.root.conn_id!r}, which cannot be read: {type(exc).__name__}: "
                                   f"{redact(str(exc))}") from None
        self.local = self.root.protocol in ("file", "local")
        self.is_home = self.local and Path(self.root.path).resolve() == config.home().resolve()

    @property
    def shown(self) -> str:
        return redact(self.url) if self.url.startswith("file:") else self.url  # checked: no password in it

    def __str__(self) -> str:
        return self.shown

    # --- objects ------------------------------------------------------------------------------

    def _path(self, rel: str) -> str:
        return (self.root / rel).path

    def read_bytes(self, rel: str) -> Optional[bytes]:
        """The object's bytes; None when there is none."""
        try:
            with self.fs.open(self._path(rel), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def read_json(self, rel: str):
        data = self.read_bytes(rel)
        try:
            return None if data is None else json.loads(data)
        except ValueError:
            return None

    def write_bytes(self, rel: str, data: bytes) -> None:
        """One object, replaced whole: a reader sees the old one or the new one (an object store's
        PUT is; a folder gets a temporary file renamed into place)."""
        path = self._path(rel)
        if self.local:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(path).with_name(f".{Path(path).name}.{uuid.uuid4().hex[:8]}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        else:
            with self.fs.open(path, "wb") as f:
                f.write(data)

    def write_json(self, rel: str, data) -> None:
        self.write_bytes(rel, json.dumps(data, indent=1, sort_keys=True, default=str).encode())

    def put(self, pairs: Sequence[Tuple[Path, str]]) -> None:
        """Upload local files to their relative paths (concurrently where the filesystem can)."""
        if not pairs:
            return
        if self.local:
            for local, rel in pairs:
                target = Path(self._path(rel))
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
                shutil.copyfile(local, tmp)
                tmp.replace(target)
            return
        self.fs.put([str(local) for local, _ in pairs], [self._path(rel) for _, rel in pairs])

    def get(self, pairs: Sequence[Tuple[str, Path]]) -> None:
        """Download objects to local files, each written aside and renamed into place."""
        if not pairs:
            return
        tmps = []
        for _, local in pairs:
            Path(local).parent.mkdir(parents=True, exist_ok=True)
            tmps.append(Path(local).with_name(f".{Path(local).name}.{uuid.uuid4().hex[:8]}.tmp"))
        try:
            self.fs.get([self._path(rel) for rel, _ in pairs], [str(t) for t in tmps])
            for tmp, (_, local) in zip(tmps, pairs):
                tmp.replace(local)
        finally:
            for tmp in tmps:
                tmp.unlink(missing_ok=True)

    def delete(self, rels: Iterable[str]) -> None:
        paths = [self._path(rel) for rel in rels]
        if paths:
            try:
                self.fs.rm(paths)
            except FileNotFoundError:
                pass

    # --- units: files, then their manifest ------------------------------------------------------

    def manifest(self, folder: str, unit: str) -> Optional[dict]:
        found = self.read_json(f"{folder}/manifests/{unit}.json")
        return found if isinstance(found, dict) and isinstance(found.get("files"), dict) else None

    def publish(self, folder: str, local: Path, unit: str, files: Iterable[str], extra: Optional[dict] = None,
                keep: Optional[Dict[str, dict]] = None, old: Optional[dict] = None, versioned: bool = False) -> dict:
        """Upload ``files`` (relative to ``local``) to ``folder``, then the unit's manifest, which
        also lists ``keep`` (entries of files already there). No object the live manifest (``old``:
        read here unless given) lists is ever written: a changed file goes to a new object
        (``<path>.v-<sha256>``), so a publish cut short leaves the live manifest whole. Objects
        only the old manifest listed are removed after. ``versioned``: every object under
        ``<unit>/<digest>/`` (immutable data sets: two workers publishing at once write apart)."""
        old = old if old is not None else (self.manifest(folder, unit) or {"files": {}})
        with contextlib.ExitStack() as stack:
            if not versioned:  # a run's files may grow while it trains: hash and send one copy
                snap = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mxbench-publish-")))
                for rel in files:
                    (snap / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(local / rel, snap / rel)
                local = snap
            return self._publish(folder, local, unit, files, extra, keep or {}, old, versioned)

    def _publish(self, folder, local: Path, unit, files, extra, keep, old, versioned) -> dict:
        live = {object_of(rel, e) for rel, e in old["files"].items()}
        listed = dict(keep)
        uploads = []
        fresh = listing(local, files)
        digest = hashlib.sha256(json.dumps(fresh, sort_keys=True).encode()).hexdigest()[:16]
        for rel, entry in fresh.items():
            was = old["files"].get(rel)
            if was and (was["sha256"], was["size"]) == (entry["sha256"], entry["size"]):
                listed[rel] = was  # unchanged: its object stays
                continue
            if versioned:
                name = f"{unit}/{digest}/{rel.split('/', 1)[1]}"
            else:
                name = rel if rel not in live else f"{rel}.v-{entry['sha256'][:16]}"
            listed[rel] = {**entry, "object": name} if name != rel else entry
            uploads.append((local / rel, f"{folder}/{name}"))
        self.put(uploads)
        manifest = {"unit": unit, "files": dict(sorted(listed.items())), "published_at": time.time(),
                    "by": socket.gethostname(), **(extra or {})}
        self.write_json(f"{folder}/manifests/{unit}.json", manifest)
        now = {object_of(rel, e) for rel, e in listed.items()}
        self.delete(f"{folder}/{name}" for name in live - now)
        return manifest

    def fetch(self, folder: str, local: Path, unit: str, only: Optional[Iterable[str]] = None) -> Optional[dict]:
        """The unit's files as its manifest lists them, into ``local`` (files already there with the
        listed sha256 are kept); ``only``: just the files with these names. None: not published."""
        manifest = self.manifest(folder, unit)
        if manifest is None:
            return None
        names = set(only) if only is not None else None
        wanted = {rel: entry for rel, entry in manifest["files"].items()
                  if names is None or Path(rel).name in names}
        missing = [rel for rel, entry in wanted.items()
                   if not ((local / rel).is_file() and (local / rel).stat().st_size == entry["size"]
                           and sha256_of(local / rel) == entry["sha256"])]
        try:
            self.get([(f"{folder}/{object_of(rel, wanted[rel])}", local / rel) for rel in missing])
        except FileNotFoundError:
            raise MxbenchError(f"{self.shown}/{folder}: a file its manifest {unit} lists is gone "
                               "(published again while it was read?): try again") from None
        for rel in missing:
            if sha256_of(local / rel) != wanted[rel]["sha256"]:
                raise MxbenchError(f"{self.shown}/{folder}/{rel} does not match its manifest "
                                   f"(published again while it was read?): try again")
        return manifest


# --- a DAG run's folder, for one task ---------------------------------------------------------

def object_of(rel: str, entry: dict) -> str:
    """The object holding a manifest's file: its own path unless the entry names another."""
    return entry.get("object", rel)


def run_units(files: Iterable[str]) -> Dict[str, List[str]]:
    """A DAG run folder's files by unit: run keys (``<key>/...``, ``attempts/<key>.<n>/...``),
    ``report``, and ``""`` for the DAG run's own files (request.json, tables/...)."""
    units: Dict[str, List[str]] = {}
    for rel in files:
        parts = rel.split("/")
        if len(parts) == 1 or parts[0] in ("tables", "manifests"):
            unit = ""
        elif parts[0] == "report":
            unit = "report"
        elif parts[0] == "attempts":
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
                names += [f"tables/{Path(p).name}" for p in self.store.fs.ls(self.store._path(f"{self.folder}/tables"),
                                                                           detail=False)]
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
            store: Optional[Store] = None) -> Iterator[Path]:
    """The DAG run's folder for one task on this worker. With the default store, the folder itself
    (``config.existing_dag_run_dir``). Otherwise a scratch folder: the DAG run's own files (and
    ``tables``), the units ``units`` (or every run's, ``all_units``; only the files named
    ``unit_files`` of each, if given) and ``report_files`` fetched into it; what the task wrote
    published when it ends, failed or not; the scratch folder removed once published (a run
    task's scratch stays when its publish fails: nothing is lost)."""
    store = store or Store()
    if store.is_home:
        yield config.existing_dag_run_dir(dag_id, run_id)
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
            request = json.loads((scratch / "request.json").read_text()) if (scratch / "request.json").is_file() else {}
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
        yield scratch
    for found in leftovers:  # published now, as interrupted: nothing to find here any more
        shutil.rmtree(found.parent, ignore_errors=True)


def run_scratch(name: str, key: str) -> Path:
    """Where a run task keeps run ``key`` of DAG run ``name`` on its worker: fixed, so that a task
    killed before it could publish leaves it where a later task on this worker finds it."""
    return config.home() / "scratch" / f"run-{key}-{hashlib.sha256(name.encode()).hexdigest()[:12]}" / name


@contextlib.contextmanager
def run_folder(dag_id: str, run_id: str, key: str, extra: Optional[dict] = None,
               store: Optional[Store] = None, every_s: float = 15.0) -> Iterator["RunSpace"]:
    """The DAG run's folder for run task ``key`` (``RunSpace.path``): with the default store, the
    folder itself. Otherwise the run's fixed scratch folder, with the run's unit (earlier
    attempts too) fetched whole; published every ``every_s`` seconds while the task runs (so that
    a retry elsewhere finds what a lost try started, and reaps it) and when it ends, succeeded or
    failed, with ``extra`` (the task's worker and try) in its manifest."""
    store = store or Store()
    if store.is_home:
        yield RunSpace(config.existing_dag_run_dir(dag_id, run_id))
        return
    name = dag_run_name(dag_id, run_id)
    scratch = run_scratch(name, key)
    scratch.mkdir(parents=True, exist_ok=True)
    space = Workspace(store, name, scratch)
    run = RunSpace(scratch)
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
    """A run task's folder of the DAG run (``path``), and ``aside``: what a try killed on this
    worker left there and a later try's publish superseded (to reap before the run starts)."""

    def __init__(self, path: Path):
        self.path, self.aside = Path(path), None


def _leftover_first(space: Workspace, key: str) -> Optional[Path]:
    """Settle what an earlier try on this worker left in the run's fixed scratch folder (killed
    before it could publish, or its publish failed) against what the store has. Ours is newer
    (a higher try number): it is the run's folder, and the store's is replaced by it (its older
    try failed, or ours would have been reused). The store's is newer or the same: ours is put
    aside as an attempt (returned, to be reaped) and the store's is fetched."""
    local = space.path / key / "meta.json"
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
    aside = space.path / "attempts" / f"{key}.lost-try{ours}-{uuid.uuid4().hex[:8]}"
    aside.parent.mkdir(exist_ok=True)
    (space.path / key).replace(aside)
    print(f"mxbench: run {key}: try {ours} on this worker did not publish and try {manifest.get('try_number')} "
          f"did: ours is kept as {aside.name}")
    return aside


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
    if not (found / key / "meta.json").is_file():
        return None
    for rel in files_under(found):
        if run_units([rel]).get(key):
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found / rel, into / rel)
    return found


# --- prepared data ----------------------------------------------------------------------------

def _data_stamp(local: Path) -> Path:
    return local.parent / f".{local.name}.fetched"


def publish_data(data: dict, store: Optional[Store] = None) -> dict:
    """Publish a prepared data set once (its manifest last). A data set already published (by
    another worker, or an earlier DAG run) is left as it is."""
    store = store or Store()
    local = Path(data["dir"])
    if store.is_home:
        return data
    manifest = store.manifest("data", local.name)
    if manifest is None:
        files = [rel for rel in files_under(local) if "/" not in rel and rel.endswith(DATA_FILES)]
        manifest = store.publish("data", local.parent, local.name, [f"{local.name}/{rel}" for rel in files],
                                 versioned=True)
    elif not _matches(local, manifest):
        return data  # another worker published its own conversion first: run tasks fetch that one
    _data_stamp(local).write_text(_digest(manifest))
    return data


def _digest(manifest: dict) -> str:
    return hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode()).hexdigest()


def _matches(local: Path, manifest: dict) -> bool:
    return all((local.parent / rel).is_file() and sha256_of(local.parent / rel) == entry["sha256"]
               for rel, entry in manifest["files"].items())


def fetch_published_data(name: str, root: Path, store: Optional[Store] = None) -> bool:
    """Fetch data set ``name`` into ``root`` when it is published and not there yet; whether it was."""
    store = store or Store()
    if store.is_home or store.manifest("data", name) is None:
        return False
    local_data({"name": name}, root, store)
    return True


def local_data(data: dict, root: Path, store: Optional[Store] = None) -> dict:
    """``data`` with ``dir`` a folder on this worker holding the published data set: fetched into
    ``root`` on first use, then reused while the store's manifest is the one fetched (a cache hit
    reads one manifest, nothing else)."""
    store = store or Store()
    if store.is_home or not data.get("name"):
        return data
    local = Path(root) / data["name"]
    try:
        manifest = store.manifest("data", data["name"])
    except Exception as exc:
        raise MxbenchError(f"reading the prepared data set {data['name']}'s manifest from the artifact store "
                           f"{store.shown} failed: {type(exc).__name__}: {redact(str(exc))}") from None
    if manifest is None:
        raise MxbenchError(f"the prepared data set {data['name']} is not in the artifact store {store.shown} "
                           "(data/manifests/): clear prepare_data")
    digest, stamp = _digest(manifest), _data_stamp(local)
    sizes_ok = lambda: all((local.parent / rel).is_file() and (local.parent / rel).stat().st_size == e["size"]  # noqa: E731
                           for rel, e in manifest["files"].items())
    if not (stamp.is_file() and stamp.read_text() == digest and sizes_ok()):
        with caches.making(local):  # runs on this worker wait for one fetch
            if not (stamp.is_file() and stamp.read_text() == digest and sizes_ok()):
                stamp.unlink(missing_ok=True)
                try:
                    store.fetch("data", local.parent, data["name"])
                except MxbenchError:
                    raise
                except Exception as exc:  # the store's client error: named, as the run's cause
                    raise MxbenchError(f"fetching the prepared data set {data['name']} from the artifact store "
                                       f"{store.shown} failed: {type(exc).__name__}: {redact(str(exc))}") from None
                stamp.write_text(digest)
        if Path(root) == config.data_dir():  # never a volume other workers share: its users are not ours to see
            caches.prune_data(root, used=(str(local),))
    return {**data, "dir": str(local)}


def published_paths(paths: Dict[str, str], dag_dir: Path, dag_id: str, run_id: str,
                    store: Optional[Store] = None) -> Dict[str, str]:
    """``paths`` (files in a task's folder of the DAG run) as the store's URLs, for the task log
    and XCom; unchanged with the default store, whose folder is the DAG run's own."""
    base = published_folder(dag_id, run_id, store)
    if base is None:
        return paths
    return {name: f"{base}/{Path(path).relative_to(dag_dir)}" for name, path in paths.items()}


def published_folder(dag_id: str, run_id: str, store: Optional[Store] = None) -> Optional[str]:
    """The DAG run's folder as the store's URL, for records that outlive a task's scratch copy;
    None with the default store (the folder is the DAG run's own)."""
    store = store or Store()
    return None if store.is_home else f"{store.shown.rstrip('/')}/runs/{dag_run_name(dag_id, run_id)}"


def read_report(dag_id: str, run_id: str, store: Optional[Store] = None) -> Optional[bytes]:
    """The published report.html of a DAG run, checked against the report's manifest; None when
    there is none yet, or the DAG run folder is another DAG's. Object storage only (the default
    store is read as a folder: ``mxbench.web``)."""
    store = store or Store()
    folder = f"runs/{dag_run_name(dag_id, run_id)}"
    manifest = store.manifest(folder, "report")
    entry = (manifest or {}).get("files", {}).get("report/report.html")
    request = store.read_json(f"{folder}/request.json") or {}
    if entry is None or request.get("dag_id") not in (None, dag_id):
        return None
    body = store.read_bytes(f"{folder}/{object_of('report/report.html', entry)}")
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
    request = json.loads((space.path / "request.json").read_text()) if (space.path / "request.json").is_file() else None
    if request is None:
        raise MxbenchError(f"the artifact store {store.shown} has no DAG run {run_id} of {dag_id} "
                           f"(runs/{name}/request.json)")
    missing = [run["key"] for run in request.get("runs", []) if space.fetch_unit(run["key"]) is None]
    space.fetch_unit("report")
    for key in missing:
        print(f"mxbench: run {key} was never published (not run, or its task was killed before it could publish)")
    return space.path
