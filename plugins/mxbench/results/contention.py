"""Was a run contended? What its workers saw of the other work on their hosts. Pure.

Each worker's ``run_end`` event carries ``host``: what ``mxbench_train.host_watch.HostWatch``
read over its training (CPU pressure, steal, CPU seconds of processes outside the run, load, GPU
processes that are not the run's, the CPU pressure of the role's own cgroup, a canary's times).
``summarise`` folds a run's workers into one row per run, host by host, worst first; a run is
**contended** when on any of its hosts other processes used at least ``FOREIGN_CORES`` of a core on
average, the hypervisor stole at least ``STEAL`` of the CPU time, another process computed on its
GPUs, the role's own cgroup waited for a CPU at least ``RUN_PRESSURE`` of its time (every launcher,
pods included: a pod cannot see its node's processes, but it feels them), or its canary ran slow
(``canary_slow``: whatever the cause, a hypervisor or memory bandwidth no counter shows). The
host-wide CPU pressure alone does not mark a run: it counts every task on the host, the run's own
roles waiting for each other's cores included. A run one of whose hosts could neither see the other
processes nor read its own cgroup is neither: ``contended`` None, unless another signal marked it.

The thresholds are the hardware's own, per launcher, where its trusted A/A calibrations
(``results.calibration``; ``config.calibration_dags``) read these signals: a run is contended when
it saw more than nearly all of them did (``from_aa``: a factor times their 90th percentile, within
bounds), so a node whose daemons always use a little CPU is not contended by them, and a dedicated
box is held to its own quiet. No single calibration can loosen them (``from_aa``'s leave-one-out:
the level is the lowest the calibrations give with any one of them left out). Elsewhere, or before
``MIN_AA_RUNS`` A/A runs read a signal, the defaults. The DAG run looks them up once, when it expands
(``contention_thresholds`` in ``request.json``), and every stage judges with that table.
"""
import math
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Iterable, List, Mapping, Optional, Tuple

from mxbench.results.machines import fingerprint

if TYPE_CHECKING:
    import pandas as pd

FOREIGN_CORES = 0.25  # cores' worth of CPU used by processes outside the run, on average over its span
STEAL = 0.05  # share of CPU time the hypervisor gave to another guest
# the share of its time the role's own cgroup waited for a CPU. Its own roles sharing the cores make
# some: with R compute threads of the run on C cores, up to 1 - C/R of the time one of them waits
# (``explained_pressure``). Without A/A runs a run is judged by what its own threads do not explain
# (``OWN_EXCESS``). Measured on the 2-core dev VM (benchmarks/quiet_vs_busy.py, a worker of 2 threads
# and a server, 3 threads: 0.33 explained; load 0.2-2.0): quiet 0.12-0.26 own pressure (-0.22..-0.08
# beyond its threads), beside a 2-process busy loop 0.58-0.74 (+0.25..+0.41); the test suite's Airflow
# stack beside a quiet 1-worker run reads 0.41-0.66 (+0.08..+0.33, its own CPU a neighbour's all the same).
# OWN_EXCESS sits below the busy runs' least (+0.25) and well above quiet's most (-0.08); a test-stack run
# above it (up to +0.33) had Airflow's own processes competing for its cores. A reading that does not say its
# threads is judged by RUN_PRESSURE, above the quiet test stack's.
RUN_PRESSURE = 0.7
OWN_EXCESS = 0.2
# the canary, without A/A runs: the slowest of the run's own timings (each worker's, before and after,
# each the fastest of ``canary.ROUNDS`` repeats) over its fastest. Measured as above: quiet 1-worker runs
# 1.07-1.16x, 2-worker ones up to 1.61x (one worker's canary timed while the other still trains), a
# neighbour that came or went mid-run 1.4x; in a fresh clone's demo (2026-12-06, 2-host runs) quiet
# rounds 1.04-1.54x (and one 1.86x), runs beside a 2-process busy loop 1.17-1.52x (each caught by its
# other readings). Above the quiet 2-worker runs' most, so that it marks no quiet run of them and costs
# no replacement round; one that stayed throughout slows both ends alike: for that the hardware's A/A
# level (or, without one, the own cgroup's pressure) is needed
CANARY_RATIO = 1.7
MIN_AA_RUNS = 8  # A/A runs that read a signal before their level replaces its default
AA_FACTOR = 2.0  # a run is contended beyond this many times the A/A runs' 90th percentile ...
FOREIGN_BOUNDS = (0.05, 1.0)  # ... within these bounds: a hundredth of a core is no neighbour, a core always is
STEAL_BOUNDS = (0.01, 0.20)
PRESSURE_FACTOR, PRESSURE_BOUNDS = 1.5, (0.05, 0.9)  # the own cgroup's waits are mostly its own: a tighter factor
# the canary's seconds: 1.15x the A/A runs' 90th percentile (their slow end of quiet) is a slowdown of
# about a fifth over a typical quiet canary, the size of what a hidden neighbour was seen to cost a run
CANARY_FACTOR, CANARY_BOUNDS = 1.15, (1e-3, 3600.0)
COLUMNS = ("hosts", "cpu_pressure", "steal", "foreign_cores", "load1", "gpu_foreign", "run_pressure",
           "pressure_source", "canary_s", "canary_ratio", "canary_cost_s", "contended", "contention",
           "interference_unread", "contention_thresholds")


@dataclass(frozen=True)
class Thresholds:
    """What marks a run contended on one kind of machine, and where the values came from."""
    foreign_cores: float = FOREIGN_CORES
    steal: float = STEAL
    source: str = "defaults"
    run_pressure: float = RUN_PRESSURE
    canary_s: Optional[float] = None  # None: judged by the run's own timings (``CANARY_RATIO``)
    # the host-wide PSI, judged only for a host that could read neither the other processes nor its
    # own cgroup (a pod on a node without cgroup v2); None: not judged, as it counts the run's own waits
    host_pressure: Optional[float] = None
    # the own cgroup's pressure beyond what the run's own threads explain (``explained_pressure``), the
    # default where no A/A level exists; None: ``run_pressure`` is the A/A runs' own (which carry the
    # run's own oversubscription), judged as read
    own_excess: Optional[float] = OWN_EXCESS

    def __str__(self) -> str:
        canary = (f"canary >= {self.canary_s:.3g} s" if self.canary_s is not None
                  else f"canary >= {CANARY_RATIO:g}x its fastest")
        host = (f" or host-wide pressure >= {self.host_pressure:.0%} where nothing else was read"
                if self.host_pressure is not None else "")
        own = (f"own cgroup waiting >= {self.own_excess:.0%} beyond what its own threads explain "
               f"(>= {self.run_pressure:.0%} where they are unknown)" if self.own_excess is not None
               else f"own cgroup waiting >= {self.run_pressure:.0%}")
        return (f"other processes >= {self.foreign_cores:.3g} cores or steal >= {self.steal:.1%} "
                f"or {own} or {canary}{host} ({self.source})")

    @classmethod
    def from_dict(cls, found) -> "Thresholds":
        """A table entry (``as_dict``); anything that is not one gives the defaults (an entry from
        before the own cgroup's pressure and the canary: their defaults)."""
        if not isinstance(found, Mapping):
            return DEFAULTS
        foreign, steal = reported_number(found.get("foreign_cores")), reported_number(found.get("steal"))
        if foreign is None or steal is None or foreign <= 0 or steal <= 0:
            return DEFAULTS
        pressure, canary = reported_number(found.get("run_pressure")), reported_number(found.get("canary_s"))
        host, excess = reported_number(found.get("host_pressure")), reported_number(found.get("own_excess"))
        aa_pressure = pressure is not None and pressure > 0 and "own_excess" in found and excess is None
        return cls(foreign, steal, str(found.get("source") or "the results store"),
                   pressure if pressure is not None and pressure > 0 else RUN_PRESSURE,
                   canary if canary is not None and canary > 0 else None,
                   host if host is not None and host > 0 else None,
                   None if aa_pressure else (excess if excess is not None and excess > 0 else OWN_EXCESS))

    def as_dict(self) -> dict:
        return asdict(self)


DEFAULTS = Thresholds()


def _level(values: List[float], bounds, factor: float = AA_FACTOR, least: int = MIN_AA_RUNS) -> Optional[float]:
    """``factor`` times the 90th percentile of ``values``, within ``bounds``; None: fewer than ``least``."""
    if len(values) < max(least, 1):
        return None
    q90 = statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]
    return round(min(max(factor * q90, bounds[0]), bounds[1]), 4)


# each signal a calibration reads: (its key, its default, its factor and bounds)
SIGNALS = (("foreign_cores", FOREIGN_CORES, AA_FACTOR, FOREIGN_BOUNDS), ("steal", STEAL, AA_FACTOR, STEAL_BOUNDS),
           ("run_pressure", RUN_PRESSURE, PRESSURE_FACTOR, PRESSURE_BOUNDS),
           ("canary_s", None, CANARY_FACTOR, CANARY_BOUNDS), ("cpu_pressure", None, PRESSURE_FACTOR, PRESSURE_BOUNDS))


LABELS = {"foreign_cores": "other processes", "steal": "steal", "run_pressure": "own cgroup waiting",
          "canary_s": "canary", "cpu_pressure": "host-wide pressure"}


def _capped_level(runs: List[Mapping], key: str, factor: float, bounds, default) -> Tuple[Optional[float], int]:
    """The level of one signal over the runs (None: fewer than ``MIN_AA_RUNS`` read it), and how
    many read it. No single calibration (a run's ``dag_run``) can loosen it: the level is the lowest
    of the one over all runs and those over the runs of all calibrations but one, each left out in
    turn (the default where none is left), so one noisy calibration cannot raise it; a quiet one may
    lower it."""
    values = [(str(r.get("dag_run")), v) for r in runs if (v := reported_number(r.get(key))) is not None]
    level = _level([v for _, v in values], bounds, factor)
    if level is None:
        return None, len(values)
    candidates = [level]
    for left_out in {c for c, _ in values}:
        rest = _level([v for c, v in values if c != left_out], bounds, factor, least=1)
        if rest is None:
            rest = default
        if rest is not None:
            candidates.append(rest)
    return min(candidates), len(values)


def from_aa(runs: Iterable[Mapping], calibrations: int = 0, dags: Iterable[str] = ()) -> Thresholds:
    """The thresholds of one kind of machine from its A/A calibrations' runs (each a mapping with
    ``foreign_cores``, ``steal``, ``run_pressure``, ``canary_s`` and ``cpu_pressure``, None where unread, and
    ``dag_run``: its calibration); a signal fewer than ``MIN_AA_RUNS`` runs read keeps its default,
    and the source says which, and of which DAGs (``dags``: the trusted ones) the calibrations were.
    See ``_capped_level`` for what one calibration can move."""
    runs = list(runs)
    found = {key: _capped_level(runs, key, factor, bounds, default) for key, default, factor, bounds in SIGNALS}
    levels = {key: level for key, (level, _) in found.items()}
    read = max(n for _, n in found.values())
    if all(v is None for v in levels.values()):
        return Thresholds(source=f"defaults: {read} A/A run(s) on this hardware read them, {MIN_AA_RUNS} needed")
    of_dags = f" of {', '.join(dags)}" if dags else ""
    of = f"{read} A/A runs on this hardware" + (
        f" ({calibrations} calibration{'s' if calibrations != 1 else ''}{of_dags})" if calibrations else of_dags)
    kept = [LABELS[key] for key, v in levels.items() if v is None]
    return Thresholds(levels["foreign_cores"] if levels["foreign_cores"] is not None else FOREIGN_CORES,
                      levels["steal"] if levels["steal"] is not None else STEAL,
                      f"from {of}: a factor over their 90th percentile, no single calibration loosening them"
                      + (f"; {', '.join(kept)} default" if kept else ""),
                      levels["run_pressure"] if levels["run_pressure"] is not None else RUN_PRESSURE,
                      levels["canary_s"], levels["cpu_pressure"],
                      OWN_EXCESS if levels["run_pressure"] is None else None)


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


def reported_number(value) -> Optional[float]:
    """A finite number a host reported, else None: what a host sends back is not trusted."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _worst(values: Iterable) -> Optional[float]:
    found = [v for v in map(reported_number, values) if v is not None]
    return max(found) if found else None


def _per_second(seconds, wall) -> Optional[float]:
    """Cores' worth of ``seconds`` of CPU over ``wall`` seconds; None when either is no number."""
    seconds, wall = reported_number(seconds), reported_number(wall)
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


def explained_pressure(threads, cpus) -> Optional[float]:
    """The share of time one of the run's own ``threads`` waits for one of ``cpus`` cores with no one
    else on the host (all busy: ``1 - cpus / threads``, 0 where they fit); None where either is unknown."""
    threads, cpus = reported_number(threads), reported_number(cpus)
    if not threads or not cpus:
        return None
    return max(0.0, 1.0 - cpus / threads)


def own_waiting(reading: Mapping, thresholds: Thresholds = DEFAULTS) -> Optional[str]:
    """Why a host reading's own cgroup waited more than its run explains, None when it did not: beyond
    the A/A level where there is one, else beyond what the run's own threads explain by ``own_excess``
    (by ``run_pressure`` where the reading does not say its threads)."""
    pressure = reported_number(reading.get("run_pressure"))
    if pressure is None:
        return None
    explained = explained_pressure(reading.get("run_threads"), reading.get("cpus"))
    if thresholds.own_excess is not None and explained is not None:
        if pressure - explained >= thresholds.own_excess:
            return (f"its own cgroup waited for a CPU {pressure:.0%} of its time "
                    f"({pressure - explained:.0%} beyond what its own {int(reading['run_threads'])} threads "
                    f"on {int(reading['cpus'])} cores explain)")
        return None
    if pressure >= thresholds.run_pressure:
        return f"its own cgroup waited for a CPU {pressure:.0%} of its time"
    return None


def canary_times(readings: Iterable[Mapping]) -> List[float]:
    """Every canary time the run's workers took (each one's before and after), seconds."""
    return [v for r in readings if isinstance(r.get("canary_s"), list) for v in map(reported_number, r["canary_s"])
            if v is not None and v > 0]


def canary_slow(times: List[float], thresholds: Thresholds = DEFAULTS) -> Optional[str]:
    """Why the run's canary ran slow (``times``: ``canary_times``), None when it did not: its slowest
    at least the hardware's A/A level (``thresholds.canary_s``), or at least ``CANARY_RATIO`` times its
    own fastest (which the A/A level, where there is one, does not replace: it adds to it)."""
    if not times:
        return None
    slowest, fastest = max(times), min(times)
    if thresholds.canary_s is not None and slowest >= thresholds.canary_s:
        return f"canary took {slowest:.3g} s (quiet A/A runs: under {thresholds.canary_s:.3g} s)"
    if slowest >= CANARY_RATIO * fastest:
        return f"canary ran {slowest / fastest:.2f}x slower than its fastest"
    return None


def summarise(events: Iterable[dict], thresholds: Thresholds = DEFAULTS) -> dict:
    """One runs-table row's interference columns (``COLUMNS``); all None when no worker said."""
    events = list(events)
    readings = host_readings(events)
    if not readings:
        return {**dict.fromkeys(COLUMNS), "contended": None,
                "interference_unread": "no worker reported its host (a trainer from before mxbench read hosts)"}
    foreign = [_per_second(r.get("foreign_cpu_s"), r.get("wall_s")) for r in readings]
    own = [reported_number(r.get("run_pressure")) for r in readings]
    gpu_foreign = sum(len(r["gpu_foreign_processes"]) for r in readings
                      if isinstance(r.get("gpu_foreign_processes"), list))
    worst_foreign, worst_steal, worst_own = _worst(foreign), _worst(r.get("steal") for r in readings), _worst(own)
    times = canary_times(readings)
    row = {"hosts": ", ".join(sorted({str(r.get("host")) for r in readings})),
           "cpu_pressure": _worst(r.get("cpu_pressure") for r in readings), "steal": worst_steal,
           "foreign_cores": worst_foreign, "load1": _worst(r.get("load1") for r in readings),
           "gpu_foreign": gpu_foreign, "run_pressure": worst_own,
           "pressure_source": "; ".join(sorted({str(r["pressure_source"])[:200] for r in readings
                                                if r.get("pressure_source")})) or None,
           "canary_s": max(times) if times else None,
           "canary_ratio": round(max(times) / min(times), 3) if times else None,
           "canary_cost_s": _worst(r.get("canary_cost_s") for r in readings)}
    reasons = []
    if worst_foreign is not None and worst_foreign >= thresholds.foreign_cores:
        reasons.append(f"other processes used {worst_foreign:.2f} cores")
    if worst_steal is not None and worst_steal >= thresholds.steal:
        reasons.append(f"steal {worst_steal:.0%}")
    if gpu_foreign:
        reasons.append(f"{gpu_foreign} other process(es) on its GPUs")
    by_pressure = sorted(readings, key=lambda r: -(reported_number(r.get("run_pressure")) or 0.0))
    waited = next((why for r in by_pressure if (why := own_waiting(r, thresholds))), None)
    if waited:  # the host that waited most, of those beyond their level
        reasons.append(waited)
    slow = canary_slow(times, thresholds)
    if slow:
        reasons.append(slow)
    # where a host read neither the other processes nor its own cgroup, its host-wide PSI is all there is,
    # judged where the hardware's A/A runs give it a level
    unseen = [reported_number(r.get("cpu_pressure"))
              for r, f, o in zip(readings, foreign, own) if f is None and o is None]
    judged = thresholds.host_pressure is not None and all(p is not None for p in unseen)
    worst_unseen = _worst(unseen)
    if judged and worst_unseen is not None and worst_unseen >= (thresholds.host_pressure or 0.0):
        reasons.append(f"host-wide CPU pressure {worst_unseen:.0%} where nothing else was read "
                       f"(quiet A/A runs: under {thresholds.host_pressure:.0%})")
    unread = sorted({str(u) for r in readings if isinstance(r.get("unreadable"), list) for u in r["unreadable"]}
                    | {str(r["gpu_unreadable"]) for r in readings if r.get("gpu_unreadable")})
    # a host that could neither see the other processes (a pod) nor read its own cgroup cannot say the
    # run was quiet, unless its host-wide PSI was judged
    blind = bool(unseen) and not judged
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


def readings_line(runs) -> Optional[str]:
    """One line for the report's conditions: where the runs' own CPU pressure came from (how many
    runs read their own cgroup, how many fell back to the host-wide PSI) and what the canary cost a
    run (its workers time it at once: the slowest worker's two timings), or None when no run said."""
    parts = []
    if "pressure_source" in runs:
        sources = runs["pressure_source"].dropna().astype(str)
        if not sources.empty:
            counts = sources.value_counts()
            parts.append("the run's own CPU pressure from " + ", ".join(
                f"{source} ({n} run{'s' if n != 1 else ''})" for source, n in sorted(counts.items())))
    if "canary_cost_s" in runs:
        cost = pd_numeric(runs["canary_cost_s"]).dropna()
        if not cost.empty:
            parts.append(f"the canary (a fixed workload each worker timed before and after its run) cost "
                         f"{cost.median():.1f} s per run (at most {cost.max():.1f} s)")
    return ("Interference readings: " + "; ".join(parts) + ".") if parts else None


def pd_numeric(column: "pd.Series") -> "pd.Series":
    import pandas as pd

    return pd.to_numeric(column, errors="coerce")
