"""Where mxbench keeps things. Environment variables only; nothing is read at import."""
import hashlib
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]


def home() -> Path:
    """MXBENCH_HOME: data, runs and (for the demo) the Airflow home."""
    return Path(os.environ.get("MXBENCH_HOME", REPO / ".mxbench"))


def train_python() -> str:
    """The training environment's interpreter, which the local launcher runs."""
    return os.environ.get("MXBENCH_TRAIN_PYTHON", str(REPO / ".venv" / "train" / "bin" / "python"))


@contextmanager
def training_python(python: Optional[str]):
    """Within the block, ``train_python()`` is ``python`` (when given): one run's MXNet build."""
    if not python:
        yield
        return
    saved = os.environ.get("MXBENCH_TRAIN_PYTHON")
    os.environ["MXBENCH_TRAIN_PYTHON"] = python
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("MXBENCH_TRAIN_PYTHON", None)
        else:
            os.environ["MXBENCH_TRAIN_PYTHON"] = saved


def data_dir() -> Path:
    return home() / "data"


def dag_run_dir(dag_run_id: str) -> Path:
    """``$MXBENCH_HOME/runs/<safe run id>-<hash>``: the id made safe as a folder name, plus a short
    hash of the id itself, so that ids differing only in replaced characters (``a:b``, ``a+b``,
    ``a_b``) never share a folder."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", dag_run_id).strip("_.-")[:120] or "run"
    return home() / "runs" / f"{safe}-{hashlib.sha256(dag_run_id.encode()).hexdigest()[:8]}"
