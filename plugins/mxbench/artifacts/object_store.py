"""The artifact store's objects: ``Store`` (one base URL, read through Airflow's object storage),
its units (files, then their manifest), and the listings a manifest holds. See ``mxbench.artifacts``
for the layout."""
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
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from mxbench import config
from mxbench.run_folder import sha256_of
from mxbench_train import json_input
from mxbench_train.errors import MxbenchError
from mxbench_train.redaction import redact

SETTING = "MXBENCH_ARTIFACTS"


def base_url() -> str:
    return os.environ.get(SETTING) or f"file://{config.home()}"


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
            return None if data is None else json_input.loads(data)
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


def object_of(rel: str, entry: dict) -> str:
    """The object holding a manifest's file: its own path unless the entry names another."""
    return entry.get("object", rel)
