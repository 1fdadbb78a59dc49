"""Where mxbench keeps things. Environment variables only; nothing is read at import."""
import hashlib
import json
import os
import re
from pathlib import Path

from mxbench.run_folder import DagRunFolder

REPO = Path(__file__).resolve().parents[2]


def dags_folder() -> Path:
    """mxbench's DAG files: the copy an installed wheel ships in the package (setup.py), else the checkout's."""
    shipped = Path(__file__).resolve().parent / "dags"
    return shipped if shipped.is_dir() else REPO / "dags"


def home() -> Path:
    """MXBENCH_HOME: data, runs and (for the demo) the Airflow home."""
    return Path(os.environ.get("MXBENCH_HOME", REPO / ".mxbench"))


def train_env_python() -> str:
    """The training env's interpreter (the pinned MXNet build of ``requirements-train.txt``), which
    the local launcher runs unless a run asks for another build (``mxnet_builds.ensure_venv``)."""
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


CALIBRATION_DAGS_ENV = "MXBENCH_CALIBRATION_DAGS"
CALIBRATION_DAGS = ("mxbench_benchmark",)  # the one DAG with the aa_calibration param


def calibration_dags(environ=os.environ) -> tuple:
    """The DAGs whose A/A calibrations may set the contention thresholds (``results.contention``):
    ``MXBENCH_CALIBRATION_DAGS`` (comma-separated DAG ids; ``none``: no DAG, the defaults judge
    everywhere), else ``mxbench_benchmark``. The deployer's setting, never a trigger param: whoever
    may trigger a DAG listed here can feed the thresholds every run on that hardware is judged by
    (within the caps of ``contention.from_aa``), so list only DAGs that operators trigger."""
    raw = environ.get(CALIBRATION_DAGS_ENV)
    if raw is not None and raw.strip().lower() == "none":
        return ()
    dags = tuple(dict.fromkeys(d.strip() for d in raw.split(",") if d.strip())) if raw else ()
    return dags or CALIBRATION_DAGS


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
# more an hour than any machine costs, in any currency: a typo (or 1e400, read as infinity, which
# would make the largest size the "cheapest")
MAX_PRICE_PER_HOUR = 1e9


def prices(environ=os.environ) -> dict:
    """The deployer's prices, by launcher: ``MXBENCH_PRICES``, JSON such as
    ``{"ssh": {"per_machine_hour": 12.0, "currency": "EUR"}, "kubernetes": {"per_device_hour": 2.5}}``.
    A launcher missing here has no price: its costs are "not set", never guessed. A price is a JSON
    number from 0 to ``MAX_PRICE_PER_HOUR`` (not true, not a string, not infinity); anything else
    is a ValueError naming the launcher and the cause.
    Returns launcher -> {"per_hour", "unit" (device or machine), "currency"}."""
    from mxbench_train import json_input

    raw = environ.get(PRICES_ENV)
    if not raw:
        return {}
    shape = (f"{PRICES_ENV} must be a JSON object of launcher -> {{\"per_device_hour\": number}} or "
             f"{{\"per_machine_hour\": number}} (one of them, and an optional \"currency\")")
    try:
        given = json_input.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{shape}; it is not JSON: {exc}") from None
    if not isinstance(given, dict):
        raise ValueError(f"{shape}, got {raw[:100]!r}")
    found = {}
    for launcher, price in given.items():
        units = [key for key in price if key in PRICE_UNITS] if isinstance(price, dict) else []
        if len(units) != 1:
            raise ValueError(f"{shape}; {launcher!r} has {json.dumps(price)[:100]}")
        value = price[units[0]]
        # bool is an int to Python; NaN fails every comparison
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_PRICE_PER_HOUR:
            raise ValueError(f"{PRICES_ENV}: {launcher}'s {units[0]} must be a number from 0 to "
                             f"{MAX_PRICE_PER_HOUR:g}, got {json.dumps(value)[:100]}")
        currency = price.get("currency", "")
        if not isinstance(currency, str):
            raise ValueError(f"{PRICES_ENV}: {launcher}'s currency must be a string, got {json.dumps(currency)[:100]}")
        found[str(launcher)] = {"per_hour": float(value), "unit": PRICE_UNITS[units[0]], "currency": currency}
    return found
