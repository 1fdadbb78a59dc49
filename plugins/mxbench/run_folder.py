"""Reading and writing the files of a DAG run's folder: JSON records (written atomically), CSV
tables and checksums. Shared by the stages, the launchers, the artifact store, the results store
and the report."""
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

CHUNK = 1 << 20


def run_logs(run_dir: Path) -> list:
    """A run's worker logs: ``rank*.log`` (local, ssh), else its pods' ``roles/worker-*.log``."""
    return sorted(Path(run_dir).glob("rank*.log")) or sorted(Path(run_dir).glob("roles/worker-*.log"))


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
        return json.loads(Path(path).read_text())
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
