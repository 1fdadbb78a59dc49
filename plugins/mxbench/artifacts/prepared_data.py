"""Prepared data sets in the artifact store: published once by the task that prepared them,
fetched (and then reused) by each worker that runs on them."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

from mxbench import config
from mxbench.artifacts.object_store import Store, files_under
from mxbench.builds import venv_and_data_caches
from mxbench.run_folder import sha256_of
from mxbench_train.errors import MxbenchError
from mxbench_train.redaction import redact

DATA_FILES = (".rec", ".idx", ".json")  # a prepared data set's published files (not its download)


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
        with venv_and_data_caches.making(local):  # runs on this worker wait for one fetch
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
            venv_and_data_caches.prune_data(root, used=(str(local),))
    return {**data, "dir": str(local)}
