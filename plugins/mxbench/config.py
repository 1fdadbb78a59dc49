"""Where mxbench keeps things. Environment variables only; nothing is read at import."""
import hashlib
import json
import os
import re
from pathlib import Path

from mxbench.run_folder import DagRunFolder

REPO = Path(__file__).resolve().parents[2]


def home() -> Path:
    """MXBENCH_HOME: data, runs and (for the demo) the Airflow home."""
    return Path(os.environ.get("MXBENCH_HOME", REPO / ".mxbench"))


def train_env_python() -> str:
    """The training env's interpreter (the pinned MXNet build of ``requirements-train.txt``), which
    the local launcher runs unless a run asks for another build (``builds.ensure_venv``)."""
    return os.environ.get("MXBENCH_TRAIN_PYTHON", str(REPO / ".venv" / "train" / "bin" / "python"))


BASELINE_DAGS_ENV = "MXBENCH_BASELINE_DAGS"
BASELINE_DAGS = ("mxbench_regression",)
# DAG runs that measure builds chosen on purpose, old ones too (a bisect's probes): never in a
# baseline, nor in the histories a regression is judged over
PROBE_DAG_IDS = ("mxbench_bisect",)


def baseline_dags(environ=os.environ) -> tuple:
    """The DAGs whose runs may be a regression check's baseline: ``MXBENCH_BASELINE_DAGS``
    (comma-separated DAG ids), else the regression DAG's own. The deployer's setting, never a
    trigger param: whoever may trigger a DAG listed here can feed the regression DAG's baselines."""
    raw = environ.get(BASELINE_DAGS_ENV)
    dags = tuple(dict.fromkeys(d.strip() for d in raw.split(",") if d.strip())) if raw else ()
    return dags or BASELINE_DAGS


def data_dir() -> Path:
    return home() / "data"


def _folder_safe(text: str, limit: int) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.-")[:limit] or "run"


def dag_run_dir(dag_id: str, run_id: str) -> Path:
    """``$MXBENCH_HOME/runs/<dag id>.<run id>-<sha256>``: both ids made safe as a folder name (and
    shortened), plus the full SHA-256 of the pair. Run ids are unique per DAG only, so the DAG id
    is part of the key, and ids differing only in replaced characters (``a:b``, ``a+b``) or past
    the shortening never share a folder."""
    digest = hashlib.sha256(json.dumps([dag_id, run_id]).encode()).hexdigest()
    return home() / "runs" / f"{_folder_safe(dag_id, 60)}.{_folder_safe(run_id, 100)}-{digest}"


def legacy_dag_run_dir(run_id: str) -> Path:
    """The folder name of runs written before folders were keyed by DAG: the run id and 32 bits
    of its hash. Read only; nothing is written there any more."""
    return home() / "runs" / f"{_folder_safe(run_id, 120)}-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"


def existing_dag_run_dir(dag_id: str, run_id: str) -> Path:
    """A DAG run's folder, for every stage that writes it and every reader: ``dag_run_dir``, else
    a folder under the legacy name that its own files prove is this DAG's (``legacy_owner``).
    ``dag_run_dir`` when neither exists. So a DAG run begun before the rename, or an old one
    cleared, keeps its folder, and no trigger user of another DAG who picks the same run id can
    write into it or be served it."""
    folder = dag_run_dir(dag_id, run_id)
    legacy = legacy_dag_run_dir(run_id)
    if folder.is_dir() or not legacy.is_dir():
        return folder
    return legacy if legacy_owner(legacy) == dag_id else folder


def legacy_owner(legacy: Path):
    """The DAG a legacy folder's own files name (``request.json``, else ``stored.json``), or None.
    A folder written before either named its DAG belongs to no DAG: any DAG could claim it, so none
    is given it (a new keyed folder is made, nothing is written into the old one)."""
    folder = DagRunFolder(legacy)
    for record in (folder.request, folder.stored):
        try:
            owner = json.loads(record.read_text(encoding="utf-8")).get("dag_id")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(owner, str) and owner:
            return owner
    return None


PRICES_ENV = "MXBENCH_PRICES"
PRICE_UNITS = {"per_device_hour": "device", "per_machine_hour": "machine"}


def prices(environ=os.environ) -> dict:
    """The deployer's prices, by launcher: ``MXBENCH_PRICES``, JSON such as
    ``{"ssh": {"per_machine_hour": 12.0, "currency": "EUR"}, "kubernetes": {"per_device_hour": 2.5}}``.
    A launcher missing here has no price: its costs are "not set", never guessed.
    Returns launcher -> {"per_hour", "unit" (device or machine), "currency"}."""
    raw = environ.get(PRICES_ENV)
    if not raw:
        return {}
    try:
        given = json.loads(raw)
        found = {}
        for launcher, price in given.items():
            (key, value), = [(k, v) for k, v in price.items() if k in PRICE_UNITS]
            if not float(value) >= 0:
                raise ValueError
            found[str(launcher)] = {"per_hour": float(value), "unit": PRICE_UNITS[key],
                                    "currency": str(price.get("currency", ""))}
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"{PRICES_ENV} must be a JSON object of launcher -> {{\"per_device_hour\": number}} or "
                         f"{{\"per_machine_hour\": number}} (one of them, and an optional \"currency\"), "
                         f"got {raw!r}") from None
    return found
