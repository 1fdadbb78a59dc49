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

The thresholds are the hardware's own, per launcher, where its A/A calibrations
(``results.calibration``) read these signals: a run is contended when it saw more other work than
nearly all of them did (``from_aa``: twice their 90th percentile, within bounds), so a node whose
daemons always use a little CPU is not contended by them, and a dedicated box is held to its own
quiet. Elsewhere, or before ``MIN_AA_RUNS`` A/A runs read a signal, the defaults. The DAG run looks them up once, when
it expands (``contention_thresholds`` in ``request.json``), and every stage judges with that table.
"""
import math
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterable, List, Mapping, Optional

from mxbench.results.machines import fingerprint

if TYPE_CHECKING:
    import pandas as pd

FOREIGN_CORES = 0.25  # cores' worth of CPU used by processes outside the run, on average over its span
STEAL = 0.05  # share of CPU time the hypervisor gave to another guest
MIN_AA_RUNS = 8  # A/A runs that read a signal before their level replaces its default
AA_FACTOR = 2.0  # a run is contended beyond this many times the A/A runs' 90th percentile ...
FOREIGN_BOUNDS = (0.05, 1.0)  # ... within these bounds: a hundredth of a core is no neighbour, a core always is
STEAL_BOUNDS = (0.01, 0.20)
COLUMNS = ("hosts", "cpu_pressure", "steal", "foreign_cores", "load1", "gpu_foreign", "contended", "contention",
           "interference_unread", "contention_thresholds")


@dataclass(frozen=True)
class Thresholds:
    """What marks a run contended on one kind of machine, and where the values came from."""
    foreign_cores: float = FOREIGN_CORES
    steal: float = STEAL
    source: str = "defaults"

    def __str__(self) -> str:
        return f"other processes >= {self.foreign_cores:.3g} cores or steal >= {self.steal:.1%} ({self.source})"

    @classmethod
    def from_dict(cls, found) -> "Thresholds":
        """A table entry (``as_dict``); anything that is not one gives the defaults."""
        if not isinstance(found, Mapping):
            return DEFAULTS
        foreign, steal = _number(found.get("foreign_cores")), _number(found.get("steal"))
        if foreign is None or steal is None or foreign <= 0 or steal <= 0:
            return DEFAULTS
        return cls(foreign, steal, str(found.get("source") or "the results store"))

    def as_dict(self) -> dict:
        return asdict(self)


DEFAULTS = Thresholds()


def _level(values: List[float], bounds) -> Optional[float]:
    """``AA_FACTOR`` times the 90th percentile of ``values``, within ``bounds``; None: too few."""
    if len(values) < MIN_AA_RUNS:
        return None
    q90 = statistics.quantiles(values, n=10, method="inclusive")[-1]
    return round(min(max(AA_FACTOR * q90, bounds[0]), bounds[1]), 3)


def from_aa(runs: Iterable[Mapping], calibrations: int = 0) -> Thresholds:
    """The thresholds of one kind of machine from its A/A calibrations' runs (each a mapping with
    ``foreign_cores`` and ``steal``, None where unread); a signal fewer than ``MIN_AA_RUNS`` runs
    read keeps its default, and the source says which."""
    runs = list(runs)
    foreign = [v for v in (_number(r.get("foreign_cores")) for r in runs) if v is not None]
    steal = [v for v in (_number(r.get("steal")) for r in runs) if v is not None]
    levels = {"foreign_cores": _level(foreign, FOREIGN_BOUNDS),
              "steal": _level(steal, STEAL_BOUNDS)}
    if all(v is None for v in levels.values()):
        return Thresholds(source=f"defaults: {len(foreign)} A/A run(s) on this hardware read them, "
                                 f"{MIN_AA_RUNS} needed")
    of = f"{max(len(foreign), len(steal))} A/A runs on this hardware" + (
        f" ({calibrations} calibration{'s' if calibrations != 1 else ''})" if calibrations else "")
    kept = [name.replace("_", " ") for name, v in levels.items() if v is None]
    return Thresholds(levels["foreign_cores"] if levels["foreign_cores"] is not None else FOREIGN_CORES,
                      levels["steal"] if levels["steal"] is not None else STEAL,
                      f"from {of}: {AA_FACTOR:g}x their 90th percentile"
                      + (f"; {', '.join(kept)} default" if kept else ""))


def table_key(machine_kind: str, launcher: str) -> str:
    """A contention table's key: a kind of machine (its fingerprint) under one launcher. Launchers
    see different neighbours on the same hardware (on the Airflow worker, Airflow's own processes;
    in a pod, none of its node's), so each has its own thresholds; an A/A arm b is its launcher."""
    return f"{launcher.removesuffix('-b')}@{machine_kind}"


def thresholds_for(table: Optional[Mapping], machine: Optional[Mapping], launcher: str) -> Thresholds:
    """The thresholds for ``launcher``'s runs on the machine whose facts are ``machine`` (a run's
    ``environment``, a quiet probe's ``machine``) in ``table`` (``request.json``'s
    ``contention_thresholds``: ``table_key`` -> ``Thresholds.as_dict``); the defaults for a machine
    and launcher the table lacks, or facts unknown."""
    if not table or not isinstance(machine, Mapping):
        return DEFAULTS
    try:
        kind = fingerprint(dict(machine))[0]
    except (AttributeError, TypeError, ValueError):  # what a host sends back is not trusted
        return DEFAULTS
    return Thresholds.from_dict(table.get(table_key(kind, launcher)))


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


def run_machine(events: Iterable[dict]) -> Optional[dict]:
    """The machine a run measured on, as its trainer said (the ``run_start`` event's environment);
    None where it said none, or something malformed (``answers.RUN_ENVIRONMENT``)."""
    from mxbench.results import answers

    start = next((e for e in events if e.get("event") == "run_start"), {})
    environment = start.get("environment")
    return environment if environment is not None and not answers.problem(answers.RUN_ENVIRONMENT, environment) \
        else None


def summarise(events: Iterable[dict], thresholds: Thresholds = DEFAULTS) -> dict:
    """One runs-table row's interference columns (``COLUMNS``); all None when no worker said."""
    events = list(events)
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
    if worst_foreign is not None and worst_foreign >= thresholds.foreign_cores:
        reasons.append(f"other processes used {worst_foreign:.2f} cores")
    if worst_steal is not None and worst_steal >= thresholds.steal:
        reasons.append(f"steal {worst_steal:.0%}")
    if gpu_foreign:
        reasons.append(f"{gpu_foreign} other process(es) on its GPUs")
    unread = sorted({str(u) for r in readings if isinstance(r.get("unreadable"), list) for u in r["unreadable"]}
                    | {str(r["gpu_unreadable"]) for r in readings if r.get("gpu_unreadable")})
    # a host that could not see the other processes (a pod) cannot say the run was quiet
    blind = any(f is None for f in foreign)
    contended = True if reasons else (None if blind else False)
    return {**row, "contended": contended, "contention": "; ".join(reasons) or None,
            "interference_unread": "; ".join(unread) or None, "contention_thresholds": str(thresholds)}


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
            f"(beyond the thresholds in the line below, or another GPU process): {keys}. Where the budget "
            "allowed, their rounds were replaced; each verdict line says what it did with them.")


def thresholds_line(runs) -> Optional[str]:
    """One line for the report's conditions: the thresholds the runs were judged with, each set
    once (the hardware's own from its A/A calibrations, or the defaults), or None when no run said."""
    if "contention_thresholds" not in runs:
        return None
    used = sorted({str(t) for t in runs["contention_thresholds"].dropna()})
    if not used:
        return None
    return "Contended means: " + "; ".join(used) + "."
