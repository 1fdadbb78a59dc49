"""Was a run contended? What its workers saw of the other work on their hosts. Pure.

Each worker's ``run_end`` event carries ``host``: what ``mxbench_train.interference.HostWatch``
read over its training (CPU pressure, steal, CPU seconds of processes outside the run, load, GPU
processes that are not the run's). ``summarise`` folds a run's workers into one row per run, host by
host, worst first; a run is **contended** when on any of its hosts other processes used at least
``FOREIGN_CORES`` of a core on average, the hypervisor stole at least ``STEAL`` of the CPU time, or
another process computed on its GPUs. CPU pressure alone does not mark a run: the run's own roles
wait for each other's cores (two workers on two cores), which is not a neighbour. A run one of
whose hosts could not see the other processes (a pod sees only its own) is neither: ``contended``
None, unless another signal marked it.
"""
import math
from typing import TYPE_CHECKING, Iterable, List, Optional

if TYPE_CHECKING:
    import pandas as pd

FOREIGN_CORES = 0.25  # cores' worth of CPU used by processes outside the run, on average over its span
STEAL = 0.05  # share of CPU time the hypervisor gave to another guest
COLUMNS = ("hosts", "cpu_pressure", "steal", "foreign_cores", "load1", "gpu_foreign", "contended", "contention",
           "interference_unread")


def _number(value) -> Optional[float]:
    """A finite number a host reported, else None: what a host sends back is not trusted."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _worst(values: Iterable) -> Optional[float]:
    found = [v for v in map(_number, values) if v is not None]
    return max(found) if found else None


def _per_second(seconds, wall) -> Optional[float]:
    """Cores' worth of ``seconds`` of CPU over ``wall`` seconds; None when either is no number."""
    seconds, wall = _number(seconds), _number(wall)
    return seconds / wall if seconds is not None and wall else None


def flags(column: "pd.Series") -> "pd.Series":
    """A runs table's ``contended`` column as booleans, a run that could not tell as not contended."""
    return column.astype(object).where(column.notna(), False).astype(bool)


def host_readings(events: Iterable[dict]) -> List[dict]:
    """The ``host`` readings of a run's workers (``run_end`` events), one per worker that had one."""
    return [e["host"] for e in events if e.get("event") == "run_end" and isinstance(e.get("host"), dict)]


def summarise(events: Iterable[dict], foreign_cores: float = FOREIGN_CORES, steal: float = STEAL) -> dict:
    """One runs-table row's interference columns (``COLUMNS``); all None when no worker said."""
    readings = host_readings(events)
    if not readings:
        return {**dict.fromkeys(COLUMNS), "contended": None,
                "interference_unread": "no worker reported its host (a trainer from before mxbench read hosts)"}
    foreign = [_per_second(r.get("foreign_cpu_s"), r.get("wall_s")) for r in readings]
    gpu_foreign = sum(len(r["gpu_foreign_processes"]) for r in readings
                      if isinstance(r.get("gpu_foreign_processes"), list))
    worst_foreign, worst_steal = _worst(foreign), _worst(r.get("steal") for r in readings)
    row = {"hosts": ", ".join(sorted({str(r.get("host")) for r in readings})),
           "cpu_pressure": _worst(r.get("cpu_pressure") for r in readings), "steal": worst_steal,
           "foreign_cores": worst_foreign, "load1": _worst(r.get("load1") for r in readings),
           "gpu_foreign": gpu_foreign}
    reasons = []
    if worst_foreign is not None and worst_foreign >= foreign_cores:
        reasons.append(f"other processes used {worst_foreign:.2f} cores")
    if worst_steal is not None and worst_steal >= steal:
        reasons.append(f"steal {worst_steal:.0%}")
    if gpu_foreign:
        reasons.append(f"{gpu_foreign} other process(es) on its GPUs")
    unread = sorted({str(u) for r in readings if isinstance(r.get("unreadable"), list) for u in r["unreadable"]}
                    | {str(r["gpu_unreadable"]) for r in readings if r.get("gpu_unreadable")})
    # a host that could not see the other processes (a pod) cannot say the run was quiet
    blind = any(f is None for f in foreign)
    contended = True if reasons else (None if blind else False)
    return {**row, "contended": contended, "contention": "; ".join(reasons) or None,
            "interference_unread": "; ".join(unread) or None}


def contended_line(runs) -> Optional[str]:
    """One line for the report's conditions: how many runs were contended and which, or None when
    none was (or none could say)."""
    if "contended" not in runs:
        return None
    marked = runs[flags(runs["contended"])]
    if marked.empty:
        return None
    keys = ", ".join(f"{row.key} ({row.contention})" for row in marked.itertuples())
    return (f"Contended: {len(marked)} of {int(runs['contended'].notna().sum())} runs had other work on their hosts "
            f"(at least {FOREIGN_CORES} of a core by other processes, or {STEAL:.0%} steal, or another GPU "
            f"process): {keys}. Where the budget allowed, their rounds were replaced; each verdict line says "
            "what it did with them.")
