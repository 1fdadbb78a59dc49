"""What else used the host while a worker trained (stdlib only): the signals that tell a noisy
neighbour from a noisy method.

``HostWatch`` reads the host's counters when training starts and when it ends, and says over that
span: CPU pressure (PSI ``some``: the share of time a runnable task waited for a CPU), steal (the
hypervisor gave the CPU to another guest), the CPU seconds of processes outside this run (a process
is the run's when it is this worker's descendant or shares its ``DMLC_PS_ROOT_URI``/``PORT``: the
run's scheduler, servers and other workers on the host), the load average, and where readable CPU
frequency and thermal throttling; on GPUs, compute processes that are not the run's, SM clock and
active throttle reasons. A signal it cannot read (no PSI, a pod that sees its own ``/proc`` only)
is named in ``unreadable`` and the rest goes on. The worker's ``run_end`` event carries the result.
"""
import os
import socket
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from . import localhost

PROC = Path("/proc")
SYS_CPU = Path("/sys/devices/system/cpu")
RUN_MARKER = ("DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT")  # the same for every role of one distributed run
TICKS = os.sysconf("SC_CLK_TCK")


def pressure_total_us(proc: Path = PROC) -> Optional[int]:
    """PSI's cumulative ``some`` stall of the CPU, microseconds; None without PSI."""
    try:
        for line in (proc / "pressure" / "cpu").read_text().splitlines():
            if line.startswith("some "):
                return int(dict(f.split("=") for f in line.split()[1:])["total"])
    except (OSError, ValueError, KeyError):
        pass
    return None


def cpu_ticks(proc: Path = PROC) -> Optional[Dict[str, int]]:
    """The host's CPU time so far, ticks: ``total`` and ``steal`` (``/proc/stat``'s cpu line)."""
    try:
        fields = (proc / "stat").read_text().splitlines()[0].split()
        values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError, IndexError):
        return None
    return {"total": sum(values), "steal": values[7]}


def _run_marker(environ: Dict[str, str]) -> Optional[tuple]:
    marker = tuple(environ.get(name) for name in RUN_MARKER)
    return marker if all(marker) else None


def _environ_of(pid: int) -> Dict[str, str]:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # another user's process, or gone: not ours
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def foreign_ticks(own_root: int, marker: Optional[tuple], also_own: Iterable[int] = ()) -> Dict[int, int]:
    """CPU ticks so far of each process that is not this run's (nor in ``also_own``), by pid."""
    own = {own_root, *localhost.descendants(own_root), *also_own}
    ticks = {}
    for pid, stat in localhost.processes():
        if pid in own or (marker is not None and _run_marker(_environ_of(pid)) == marker):
            continue
        ticks[pid] = stat.cpu_ticks
    return ticks


def _cpu_mhz() -> Optional[float]:
    freqs = []
    for path in SYS_CPU.glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            freqs.append(int(path.read_text()) / 1000)
        except (OSError, ValueError):
            pass
    return round(sum(freqs) / len(freqs), 1) if freqs else None


def _throttle_count() -> Optional[int]:
    counts = []
    for path in SYS_CPU.glob("cpu[0-9]*/thermal_throttle/core_throttle_count"):
        try:
            counts.append(int(path.read_text()))
        except (OSError, ValueError):
            pass
    return sum(counts) if counts else None


def _load1() -> Optional[float]:
    try:
        return float((PROC / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class HostWatch:
    """Start when training starts, ``stop()`` when it ends: the span's interference, a dict."""

    def __init__(self, gpus=(), own_root: Optional[int] = None):
        self.gpus, self.own_root = list(gpus), own_root or os.getpid()
        self.marker = _run_marker(dict(os.environ))

    def start(self):
        self.started = time.monotonic()
        self.pressure, self.cpu = pressure_total_us(), cpu_ticks()
        self.foreign, self.throttle = foreign_ticks(self.own_root, self.marker), _throttle_count()
        return self

    def stop(self) -> dict:
        wall = time.monotonic() - self.started
        pressure, cpu, throttle = pressure_total_us(), cpu_ticks(), _throttle_count()
        unreadable: List[str] = []
        found = {"host": socket.gethostname(), "wall_s": round(wall, 3), "cpus": os.cpu_count(),
                 "load1": _load1(), "cpu_mhz": _cpu_mhz()}
        if pressure is None or self.pressure is None:
            unreadable.append("cpu pressure (no /proc/pressure/cpu)")
        else:
            found["cpu_pressure"] = round((pressure - self.pressure) / 1e6 / wall, 4) if wall > 0 else None
        if cpu is None or self.cpu is None:
            unreadable.append("steal (no /proc/stat)")
        else:
            total = cpu["total"] - self.cpu["total"]
            found["steal"] = round((cpu["steal"] - self.cpu["steal"]) / total, 4) if total > 0 else 0.0
        found["foreign_cpu_s"] = round(self._foreign_seconds(), 3)
        if throttle is not None and self.throttle is not None:
            found["cpu_throttled"] = throttle - self.throttle
        if found["cpu_mhz"] is None:
            unreadable.append("cpu frequency (no cpufreq)")
        if self.gpus:
            found.update(gpu_interference(self.gpus, self.own_root, self.marker))
        found["unreadable"] = unreadable
        return found

    def _foreign_seconds(self) -> float:
        """CPU seconds the processes outside the run used over the span: a process that started
        during it counts from zero, one that ended during it is missed (it can no longer be read)."""
        now = foreign_ticks(self.own_root, self.marker)
        return sum(ticks - self.foreign.get(pid, 0) for pid, ticks in now.items() if ticks >= self.foreign.get(pid, 0)
                   ) / TICKS


def gpu_interference(gpus, own_root: int, marker: Optional[tuple]) -> dict:
    """GPU compute processes that are not the run's, and each GPU's SM clock and active throttle reasons."""
    from .telemetry import _nvidia_smi

    out, why = _nvidia_smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
    if out is None:
        return {"gpu_unreadable": why}
    own = {own_root, *localhost.descendants(own_root)}
    foreign = []
    for line in out.strip().splitlines():
        pid, name, memory = (part.strip() for part in line.split(",", 2))
        if pid.isdigit() and int(pid) not in own and not (marker and _run_marker(_environ_of(int(pid))) == marker):
            foreign.append({"pid": int(pid), "name": name, "memory_mib": memory})
    clocks, why = _nvidia_smi("--query-gpu=index,clocks.sm,clocks_throttle_reasons.active",
                              "--format=csv,noheader,nounits", "-i", ",".join(str(g) for g in gpus))
    return {"gpu_foreign_processes": foreign,
            "gpu_clocks": [dict(zip(("index", "sm_mhz", "throttle_reasons"), (p.strip() for p in line.split(","))))
                           for line in (clocks or "").strip().splitlines()],
            **({"gpu_unreadable": why} if clocks is None else {})}
