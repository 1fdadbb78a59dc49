"""A quiet check before each run: wait, within a bound, until the run's hosts are quiet.

Before a run starts, its launcher looks at each of the run's hosts for a short window
(``SAMPLE_S``; ``mxbench_train.quiet_probe.sample``: on the Airflow worker itself for ``local``, by
``python -m mxbench_train quiet-probe`` over the run's SSH connections for ``ssh``). A host is
**quiet** when the processes that are not ours used less than ``foreign_cores`` of a core and the
hypervisor stole less than ``steal`` of the CPU over the window: the thresholds that mark a run
contended (``results.contention``), so a run started on a quiet host would not have been marked
contended by what ran before it. CPU pressure is recorded, not judged (it counts our own waits too).
The check looks again until every host is quiet or the bound (``quiet_wait_s``) is spent, and never
fails the run: the run's ``meta.json`` keeps ``quiet``: how long it waited, whether the hosts were
quiet, the last reading of each host and why it stopped; the runs table has ``quiet_wait_s``.

Not checked (recorded as such): Kubernetes (a pod sees only its own ``/proc``, not its node's; its
pods read their own cgroup's pressure and time the canary while they train, which judge the run
afterwards, ``results.contention``), a launcher with no way to look, a bound of 0, a host whose
reading is malformed (``answers.QUIET_READING``: the record names the host and the field). Each host
is judged with its own kind of machine's thresholds (the probe reports the machine's facts;
``contention.thresholds_for`` finds them in the DAG run's table, the hardware's A/A calibrations'
level or the defaults).
"""
import time
from typing import Callable, Dict, List, Mapping, Optional

from mxbench.results import answers
from mxbench.results.contention import DEFAULTS, Thresholds, thresholds_for
from mxbench_train.errors import MxbenchError

SAMPLE_S = 2.0  # one look at the hosts
NOT_CHECKED_K8S = "a pod sees only its own /proc, not its node's"


def noisy(reading: dict, thresholds: Thresholds = DEFAULTS) -> List[str]:
    """Why one host's reading is not quiet; [] when it is (a signal it could not read is no reason)."""
    reasons = []
    foreign = reading.get("foreign_cores")
    if isinstance(foreign, (int, float)) and foreign >= thresholds.foreign_cores:
        top = ", ".join(f"{p.get('name')} pid {p.get('pid')} {p.get('cores', 0):.2f}"
                        for p in (reading.get("foreign_top") or [])[:3] if isinstance(p, dict))
        reasons.append(f"other processes used {foreign:.2f} cores" + (f" ({top})" if top else ""))
    steal = reading.get("steal")
    if isinstance(steal, (int, float)) and steal >= thresholds.steal:
        reasons.append(f"steal {steal:.0%}")
    return reasons


def not_checked(why: str, bound_s: float = 0) -> dict:
    return {"quiet": None, "waited_s": 0.0, "samples": 0, "bound_s": bound_s, "readings": {},
            "why": f"not checked: {why}"}


Probe = Callable[[float], Dict[str, dict]]  # seconds -> {host: reading}


def _readings(found) -> Dict[str, dict]:
    """A probe's {host: reading}, each reading checked (``answers.QUIET_READING``): what a host
    sends back is not trusted. A malformed one says why (``malformed``), and nothing else of it is kept."""
    if not isinstance(found, dict):
        raise MxbenchError(f"the hosts' readings are not a JSON object but {type(found).__name__}")
    checked = {}
    for host, reading in found.items():
        wrong = answers.problem(answers.QUIET_READING, reading)
        checked[str(host)] = {"malformed": wrong} if wrong else reading
    return checked


def wait_quiet(probe: Probe, bound_s: float, table: Optional[Mapping] = None, sample_s: float = SAMPLE_S,
               clock: Callable[[], float] = time.monotonic, launcher: str = "local") -> dict:
    """Look at the hosts (``probe``) until all are quiet or ``bound_s`` is spent; never raises.
    ``table``: the DAG run's contention thresholds by kind of machine and ``launcher``
    (``thresholds_for``).

    The record: ``quiet`` (True, False, or None when not checked), ``waited_s``, ``samples``,
    ``bound_s``, ``thresholds`` (each host's), ``readings`` (each host's last one), ``noisy`` (each
    busy host's reasons at the last look) and ``why`` in words."""
    if bound_s <= 0:
        return not_checked("quiet_wait_s is 0 (off)")
    started, samples = clock(), 0
    window = min(sample_s, bound_s)
    readings: Dict[str, dict] = {}
    busy: Dict[str, List[str]] = {}
    thresholds: Dict[str, Thresholds] = {}
    while True:
        try:
            readings = _readings(probe(window))
        except Exception as exc:  # a host that cannot be looked at: the run goes on, the record says why
            record = not_checked(str(exc) if isinstance(exc, MxbenchError) else f"{type(exc).__name__}: {exc}",
                                 bound_s)
            return {**record, "waited_s": round(clock() - started, 3), "samples": samples, "readings": readings}
        malformed = {host: r["malformed"] for host, r in readings.items() if r.get("malformed")}
        if malformed:  # that host's check fails, saying why; the run goes on
            why = "; ".join(f"{host}: its reading is malformed ({wrong})" for host, wrong in sorted(malformed.items()))
            return {**not_checked(why, bound_s), "waited_s": round(clock() - started, 3), "samples": samples + 1,
                    "readings": readings}
        samples += 1
        thresholds = {host: thresholds_for(table, r.get("machine"), launcher) for host, r in readings.items()}
        busy = {host: reasons for host, r in readings.items() if (reasons := noisy(r, thresholds[host]))}
        waited = clock() - started
        if not busy or waited + window > bound_s:
            break
    if not busy:
        why = (f"quiet at the first look ({window:g} s)" if samples == 1
               else f"quiet after {samples} looks of {window:g} s")
    else:
        why = (f"not quiet after {waited:.0f} s (the bound is {bound_s:g} s), the run went on: "
               + "; ".join(f"{host}: {', '.join(reasons)}" for host, reasons in sorted(busy.items())))
    return {"quiet": not busy, "waited_s": round(waited, 3), "samples": samples, "bound_s": bound_s,
            "thresholds": {host: t.as_dict() for host, t in thresholds.items()}, "readings": readings,
            "noisy": busy, "why": why}


def check(launcher, variant, bound_s: float, table: Optional[Mapping] = None, **kwargs) -> dict:
    """The run's quiet check through its launcher's ``quiet_probe(variant, seconds)``; a launcher
    without one is not checked. Never raises: the run goes on whatever this finds."""
    probe = getattr(launcher, "quiet_probe", None)
    if bound_s <= 0:
        return not_checked("quiet_wait_s is 0 (off)")
    if probe is None:
        return not_checked(f"the {getattr(launcher, 'name', '?')} launcher cannot look at its hosts", bound_s)
    return wait_quiet(lambda seconds: probe(variant, seconds), bound_s, table,
                      launcher=getattr(launcher, "name", "local"), **kwargs)


def columns(record: Optional[dict]) -> dict:
    """The runs table's columns of a run's quiet check (``meta.json``'s ``quiet``): ``quiet_wait_s``
    (seconds waited before it started) and ``quiet`` (True, False, or None: not checked, or a run
    from before the check)."""
    if not isinstance(record, dict):
        return {"quiet_wait_s": None, "quiet": None}
    return {"quiet_wait_s": record.get("waited_s"), "quiet": record.get("quiet")}
