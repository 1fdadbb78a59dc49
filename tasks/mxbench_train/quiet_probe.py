"""Is this host quiet enough to start a benchmark run? One short look (stdlib only).

``sample(seconds)`` reads the host's counters, waits ``seconds`` and reads them again, with the
readers ``host_watch.HostWatch`` uses over a run: CPU pressure (PSI ``some``), steal, and the CPU
of the processes that are not ours, as cores on average over the window, with the busiest of them by
pid and name. **Ours** is the process that samples, what it started, and the processes above it
(on the Airflow worker: the run task, its task supervisor and the worker or executor that started
it, up to init; on an SSH host: the probe and its SSH session). Everything else is foreign, other
Airflow tasks running at once and a dag-processor's parse included: the run has not started yet,
so whatever else computes now would compete with it. Judging is the orchestration's
(``mxbench.hosts.quiet_gate``): this only reads, and names what it cannot read.

``python -m mxbench_train quiet-probe --seconds N`` prints one sample as one JSON line: what the
SSH launcher runs on each host.
"""
import os
import socket
import threading
import time
from typing import Iterable, List

from . import host_watch, localhost, telemetry

TOP = 5  # the busiest foreign processes named in a sample
FACTS_GRACE_S = 2.0  # how long past its window a look waits for the machine facts (nvidia-smi)


def sample(seconds: float, own_root: int = 0, also_own: Iterable[int] = ()) -> dict:
    """One look at this host over ``seconds``: {host, window_s, cpus, load1, cpu_pressure, steal,
    foreign_cores, foreign_top, unreadable, machine} (``machine``: the facts that name its kind, by
    which the orchestration finds the thresholds to judge it with). ``own_root`` (default: this process) and its
    descendants and ancestors are ours, and so is ``also_own``."""
    own_root = own_root or os.getpid()
    ours = {own_root, *localhost.ancestors(own_root), *also_own}
    # the machine's facts (nvidia-smi may take a second) are read while the window passes, not after
    facts: dict = {}
    reader = threading.Thread(target=lambda: facts.update(telemetry.machine_facts()), daemon=True)
    reader.start()
    started = time.monotonic()
    pressure, cpu = host_watch.pressure_total_us(), host_watch.cpu_ticks()
    parents: dict = {}
    before = host_watch.foreign_ticks(own_root, None, ours, parents)
    time.sleep(max(0.0, seconds))
    after = host_watch.foreign_ticks(own_root, None, ours)
    pressure_end, cpu_end = host_watch.pressure_total_us(), host_watch.cpu_ticks()
    window = time.monotonic() - started
    unreadable: List[str] = []
    found = {"host": socket.gethostname(), "window_s": round(window, 3), "cpus": os.cpu_count(),
             "load1": host_watch._load1()}
    if pressure is None or pressure_end is None:
        unreadable.append("cpu pressure (no /proc/pressure/cpu)")
    else:
        found["cpu_pressure"] = round((pressure_end - pressure) / 1e6 / window, 4)
    if cpu is None or cpu_end is None:
        unreadable.append("steal (no /proc/stat)")
    else:
        total = cpu_end["total"] - cpu["total"]
        found["steal"] = round((cpu_end["steal"] - cpu["steal"]) / total, 4) if total > 0 else 0.0
    # a process that started in the window counts from zero; one that ended in it, in the process that waited for it
    used = host_watch.used_ticks(before, after, parents)
    cores = {pid: ticks / host_watch.TICKS / window for (pid, _), ticks in used.items()}
    found["foreign_cores"] = round(float(sum(cores.values())), 3)
    found["foreign_top"] = [{"pid": pid, "name": localhost.name(pid), "cores": round(c, 3)}
                            for pid, c in sorted(cores.items(), key=lambda item: -item[1])[:TOP]]
    reader.join(FACTS_GRACE_S)
    if reader.is_alive():  # no facts, no kind of machine: judged by the default thresholds
        unreadable.append(f"machine facts (nvidia-smi did not answer within {FACTS_GRACE_S:g} s of the window)")
    found["machine"] = None if reader.is_alive() else facts
    found["unreadable"] = unreadable
    return found
