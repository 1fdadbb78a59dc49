"""Where mxbench keeps things. Environment variables only; nothing is read at import."""
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def home() -> Path:
    """MXBENCH_HOME: data, runs and (for the demo) the Airflow home."""
    return Path(os.environ.get("MXBENCH_HOME", REPO / ".mxbench"))


def train_python() -> str:
    """The training environment's interpreter, which the local launcher runs."""
    return os.environ.get("MXBENCH_TRAIN_PYTHON", str(REPO / ".venv" / "train" / "bin" / "python"))


def data_dir() -> Path:
    return home() / "data"


def dag_run_dir(dag_run_id: str) -> Path:
    """``$MXBENCH_HOME/runs/<run id>``, the id made safe as a folder name."""
    return home() / "runs" / re.sub(r"[^A-Za-z0-9._-]+", "_", dag_run_id).strip("_")
