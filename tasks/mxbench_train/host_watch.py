"""What else used the host while a worker trained (stdlib only): the signals that tell a noisy
neighbour from a noisy method.

``HostWatch`` reads the host's counters when training starts and when it ends, and says over that
span: CPU pressure (PSI ``some``: the share of time a runnable task waited for a CPU), steal (the
hypervisor gave the CPU to another guest), the CPU seconds of processes outside this run (a process
is the run's when it is this worker's descendant or shares its ``DMLC_PS_ROOT_URI``/``PORT``: the
run's scheduler, servers and other workers on the host, with the short-lived processes they ran),
the load average, and where readable CPU
frequency and thermal throttling; on GPUs, compute processes that are not the run's, SM clock and
active throttle reasons. A signal it cannot read (no PSI, a pod that sees its own ``/proc`` only)
is named in ``unreadable`` and the rest goes on. The worker's ``run_end`` event carries the result.

Two readings see what the others cannot, on every launcher, pods included: ``run_pressure``, the
CPU pressure of the role's own cgroup (``cgroup.run_cgroup``: the share of the span its own tasks
were runnable and waiting; ``pressure_source`` says whose, or that the host-wide PSI stands in;
``run_threads`` what the run's own roles on the host ask of its ``cpus``, which explains part of it),
and ``canary_s``, the fixed workload of ``canary`` timed right before and right after the span
(``canary_cost_s``: what timing it cost the run).

``net_sent_bytes``: what the host sent over the span through its interfaces other than ``lo``
(``/proc/net/dev`` of the worker's network namespace): the run's pushes and pulls to the other
hosts, with whatever else the host sent meanwhile. The scaling model divides it by the worker's
batches to learn the network term from runs at two link rates (``results.scaling_model``).
"""
import os
import socket
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from . import canary, cgroup, localhost

PROC = Path("/proc")
SYS_CPU = Path("/sys/devices/system/cpu")
RUN_MARKER = ("DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT")  # the same for every role of one distributed run
POD_ENV = "MXBENCH_IN_POD"  # set by ``pod-role``: this process sees only its pod's processes, not its node's
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
        return {"total": sum(values), "steal": values[7]}
    except (OSError, ValueError, IndexError):
        return None


def _run_marker(environ: Dict[str, str]) -> Optional[tuple]:
    marker = tuple(environ.get(name) for name in RUN_MARKER)
    return marker if all(marker) else None


def _environ_of(pid: int) -> Dict[str, str]:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # another user's process, or gone: not ours
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def foreign_ticks(own_root: int, marker: Optional[tuple], also_own: Iterable[int] = (),
                  parents: Optional[Dict[Tuple[int, int], int]] = None) -> Dict[Tuple[int, int], int]:
    """CPU ticks so far of each process that is not this run's (nor its launcher above it, nor in
    ``also_own``, nor a kernel thread), by (pid, start ticks): a pid reused meanwhile is another process.
    A process's ticks include those of its ended children it waited for: a test suite's or a build's
    short-lived processes show in the process that runs them. ``parents``, when given, gets each
    one's parent pid (for ``used_ticks``)."""
    own = {own_root, *localhost.descendants(own_root), *localhost.ancestors(own_root), *also_own}
    ticks = {}
    for pid, stat in localhost.processes():
        if pid in own or pid == 2 or stat.ppid == 2:  # kthreadd and its threads: the kernel's own work
            continue
        if marker is not None and _run_marker(_environ_of(pid)) == marker:
            continue
        ticks[(pid, stat.start_ticks)] = stat.cpu_ticks + stat.children_ticks
        if parents is not None:
            parents[(pid, stat.start_ticks)] = stat.ppid
    return ticks


def used_ticks(before: Dict[Tuple[int, int], int], after: Dict[Tuple[int, int], int],
               parents: Dict[Tuple[int, int], int]) -> Dict[Tuple[int, int], int]:
    """The ticks each foreign process used between two ``foreign_ticks`` readings, by (pid, start ticks).
    One that started in between counts from zero. One that ended in between is counted by the nearest
    process above it (by ``parents``, before's) that is foreign and still there, which waited for it;
    its ticks before the span are taken off that one, as they were counted already. One whose time went
    to one of ours, or to init (its parent ended first), is missed."""
    used = {key: ticks - before.get(key, 0) for key, ticks in after.items()}
    before_keys = {key[0]: key for key in before}
    for key in before.keys() - after.keys():
        pid, seen = parents.get(key), set()
        while pid is not None and pid not in seen:
            seen.add(pid)
            holder = before_keys.get(pid)
            if holder is None:  # ours, or gone before the span: its time is not counted here
                break
            if holder in after:
                used[holder] -= before[key]
                break
            pid = parents.get(holder)
    return {key: ticks for key, ticks in used.items() if ticks > 0}


def _threads(environ: Dict[str, str]) -> int:
    try:
        return max(1, int(environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def run_threads(marker: Optional[tuple], in_pod: bool) -> int:
    """The compute threads of this run's roles on this host, as their starter set them
    (``OMP_NUM_THREADS`` of each worker and server): what the run itself asks of the host's cores.
    A pod sees only itself: its own."""
    if in_pod or marker is None:
        return _threads(dict(os.environ))
    found = 0
    for pid, _ in localhost.processes():
        environ = _environ_of(pid)
        if environ.get("DMLC_ROLE") in ("worker", "server") and _run_marker(environ) == marker:
            found += _threads(environ)
    return found or _threads(dict(os.environ))


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


def sent_bytes(proc: Path = PROC) -> Optional[int]:
    """Bytes sent so far through every interface but ``lo`` (``/proc/net/dev``'s transmit bytes,
    the ninth number after the name); None where unreadable."""
    try:
        lines = (proc / "net" / "dev").read_text().splitlines()[2:]
        counts = {name.strip(): int(numbers.split()[8]) for name, numbers in (line.split(":", 1) for line in lines)}
    except (OSError, ValueError, IndexError):
        return None
    return sum(count for name, count in counts.items() if name != "lo")


def _load1() -> Optional[float]:
    try:
        return float((PROC / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class HostWatch:
    """Start when training starts, ``stop()`` when it ends: the span's interference, a dict. Never
    raises: what it could not read is said in ``unreadable``, and training goes on."""

    def __init__(self, gpus=(), own_root: Optional[int] = None):
        self.gpus, self.own_root = list(gpus), own_root or os.getpid()
        self.marker = _run_marker(dict(os.environ))
        self.in_pod = bool(os.environ.get(POD_ENV))
        self.failed: Optional[str] = None

    def start(self):
        self.canary_before: Optional[float] = None
        try:
            self.canary_before = canary.time_it()  # before the span: its own time is no one's interference
        except Exception:  # noqa: BLE001 - a reading must never cost the run (the after one says it alone)
            pass
        try:
            self.cgroup, self.pressure_source = cgroup.run_cgroup(os.environ, self.in_pod)
            self.run_pressure = cgroup.pressure_total_us(self.cgroup) if self.cgroup else None
        except Exception as exc:  # noqa: BLE001 - a reading must never cost the run
            self.cgroup, self.run_pressure, self.pressure_source = None, None, f"failed: {exc}"
        self.started = time.monotonic()
        try:
            self.pressure, self.cpu, self.throttle = pressure_total_us(), cpu_ticks(), _throttle_count()
            self.sent = sent_bytes()
            self.parents: Dict[Tuple[int, int], int] = {}
            self.foreign = {} if self.in_pod else foreign_ticks(self.own_root, self.marker, (), self.parents)
            self.gpu_start = gpu_interference(self.gpus, self.own_root, self.marker) if self.gpus else {}
        except Exception as exc:  # noqa: BLE001 - a reading must never cost the run
            self.failed = f"host watch failed at start: {type(exc).__name__}: {exc}"
        return self

    def stop(self) -> dict:
        try:
            return self._stop()
        except Exception as exc:  # noqa: BLE001 - a reading must never cost the run
            return {"host": socket.gethostname(), "unreadable": [f"host watch failed: {type(exc).__name__}: {exc}"]}

    def _stop(self) -> dict:
        if self.failed:
            return {"host": socket.gethostname(), "unreadable": [self.failed]}
        wall = time.monotonic() - self.started
        pressure, cpu, throttle = pressure_total_us(), cpu_ticks(), _throttle_count()
        run_pressure = cgroup.pressure_total_us(self.cgroup) if self.cgroup else None
        unreadable: List[str] = []
        found = {"host": socket.gethostname(), "wall_s": round(wall, 3), "cpus": os.cpu_count(),
                 "load1": _load1(), "cpu_mhz": _cpu_mhz(), "pressure_source": self.pressure_source,
                 "run_threads": run_threads(self.marker, self.in_pod)}
        if run_pressure is not None and self.run_pressure is not None and wall > 0:
            found["run_pressure"] = round((run_pressure - self.run_pressure) / 1e6 / wall, 4)
        else:
            unreadable.append(f"the run's own cpu pressure ({self.pressure_source})")
        if pressure is None or self.pressure is None:
            unreadable.append("cpu pressure (no /proc/pressure/cpu)")
        else:
            found["cpu_pressure"] = round((pressure - self.pressure) / 1e6 / wall, 4) if wall > 0 else None
        if cpu is None or self.cpu is None:
            unreadable.append("steal (no /proc/stat)")
        else:
            total = cpu["total"] - self.cpu["total"]
            found["steal"] = round((cpu["steal"] - self.cpu["steal"]) / total, 4) if total > 0 else 0.0
        if self.in_pod:
            unreadable.append("CPU used by other processes (a pod sees only its own processes, not its node's)")
        else:
            found["foreign_cpu_s"] = round(self._foreign_seconds(), 3)
        sent = sent_bytes()
        if sent is None or self.sent is None:
            unreadable.append("bytes sent (no /proc/net/dev)")
        else:
            found["net_sent_bytes"] = sent - self.sent
        if throttle is not None and self.throttle is not None:
            found["cpu_throttled"] = throttle - self.throttle
        if found["cpu_mhz"] is None:
            unreadable.append("cpu frequency (no cpufreq)")
        if self.gpus:  # at both ends: a process that came and went is foreign all the same
            ended = gpu_interference(self.gpus, self.own_root, self.marker)
            seen = {p["pid"]: p for p in [*self.gpu_start.get("gpu_foreign_processes", []),
                                          *ended.get("gpu_foreign_processes", [])]}
            found.update(ended, gpu_foreign_processes=list(seen.values()))
        found.update(self._canary())
        found["unreadable"] = unreadable
        return found

    def _canary(self) -> dict:
        """The canary's time after the span, beside the one before it, and what both cost."""
        started = time.monotonic()
        try:
            after = canary.time_it()
        except Exception as exc:  # noqa: BLE001 - a reading must never cost the run
            return {"canary_s": [self.canary_before] if self.canary_before else [],
                    "canary_failed": f"{type(exc).__name__}: {exc}"}
        if self.canary_before is None:
            return {"canary_s": [after]}
        return {"canary_s": [self.canary_before, after],
                "canary_cost_s": round(2 * (time.monotonic() - started), 3)}

    def _foreign_seconds(self) -> float:
        """CPU seconds the processes outside the run used over the span (``used_ticks``)."""
        return sum(used_ticks(self.foreign, foreign_ticks(self.own_root, self.marker), self.parents).values()) / TICKS


def gpu_interference(gpus, own_root: int, marker: Optional[tuple]) -> dict:
    """Compute processes on the run's GPUs that are not the run's, and each of those GPUs' SM clock
    and active throttle reasons; a line nvidia-smi prints that does not parse is passed over."""
    from .telemetry import _nvidia_smi

    wanted = ",".join(str(g) for g in gpus)
    uuids, why = _nvidia_smi("--query-gpu=uuid", "--format=csv,noheader", "-i", wanted)
    if uuids is None:
        return {"gpu_unreadable": why}
    ours = {u.strip() for u in uuids.splitlines() if u.strip()}
    out, why = _nvidia_smi("--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                           "--format=csv,noheader,nounits")
    if out is None:
        return {"gpu_unreadable": why}
    own = {own_root, *localhost.descendants(own_root)}
    foreign = []
    for line in out.strip().splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 4 or parts[0] not in ours or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        if pid not in own and not (marker and _run_marker(_environ_of(pid)) == marker):
            foreign.append({"pid": pid, "name": ",".join(parts[2:-1]), "memory_mib": parts[-1]})
    clocks, why = _nvidia_smi("--query-gpu=index,clocks.sm,clocks_throttle_reasons.active",
                              "--format=csv,noheader,nounits", "-i", wanted)
    readings = [line.split(",") for line in (clocks or "").strip().splitlines()]
    return {"gpu_foreign_processes": foreign,
            "gpu_clocks": [dict(zip(("index", "sm_mhz", "throttle_reasons"), (p.strip() for p in parts)))
                           for parts in readings if len(parts) == 3],
            **({"gpu_unreadable": why} if clocks is None else {})}
