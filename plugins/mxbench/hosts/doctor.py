"""``mxbench doctor``: what makes this machine a poor benchmark host, each with its fix (as
``pyperf system show`` does for Python benchmarks).

Each check reads the kernel's files under ``root`` (``/`` by default; the tests plant a fake
``proc/`` and ``sys/`` tree) and gives one ``Finding``: ``ok``, ``poor`` (with the fix, a command
for root), ``unreadable`` (the file it could not read, named), or ``n/a`` (no GPU tool). The
checks: load average against the cores, CPU frequency governor, turbo, swap in use, transparent
huge pages, CPU pressure and steal right now (over a short window), and with ``nvidia-smi``: other
GPU processes, persistence mode, SM clocks and throttle reasons. Nothing here changes a setting.
"""
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from mxbench.results.contention import STEAL
from mxbench_train import host_watch

PRESSURE = 0.10  # a runnable task waited for a CPU this share of the window: something else computes
CPU = Path("sys/devices/system/cpu")
THROTTLE_HARMLESS = 0x1 | 0x2  # GPU idle, applications clocks setting
Smi = Callable[..., Tuple[Optional[str], Optional[str]]]  # nvidia-smi's stdout, or None and why


@dataclass(frozen=True)
class Finding:
    item: str
    status: str  # ok, poor, unreadable, n/a
    seen: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.status:<10}  {self.item}: {self.seen}" + (f"  -> fix: {self.fix}" if self.fix else "")


def _read(root: Path, relative) -> Optional[str]:
    try:
        return (root / relative).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _unreadable(item: str, *paths) -> Finding:
    return Finding(item, "unreadable", "cannot read " + " or ".join(f"/{p}" for p in paths))


def cores(root: Path) -> Optional[int]:
    """Online CPUs (``/sys/devices/system/cpu/online``: ``0-3,8``)."""
    text = _read(root, CPU / "online")
    if not text:
        return None
    count = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


def check_load(root: Path) -> Finding:
    text = _read(root, "proc/loadavg")
    try:
        ncpu = cores(root)
    except ValueError:
        ncpu = None
    try:
        load1 = float((text or "").split()[0])
    except (ValueError, IndexError):
        return _unreadable("load", "proc/loadavg")
    if not ncpu:
        return _unreadable("load", CPU / "online")
    seen = f"load average {load1:.2f} over the last minute on {ncpu} cores"
    if load1 >= max(1.0, 0.1 * ncpu):
        return Finding("load", "poor", seen, "see what runs (top -o %CPU) and stop it, or wait until it ends")
    return Finding("load", "ok", seen)


def _cpu_ranges(cpus: List[int]) -> str:
    """0,1,2,5 -> cpu0-2,5"""
    cpus, parts = sorted(cpus), []
    start = prev = cpus[0]
    for cpu in cpus[1:] + [None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        parts.append(f"{start}-{prev}" if prev > start else f"{start}")
        if cpu is not None:
            start = prev = cpu
    return "cpu" + ",".join(parts)


def check_governor(root: Path) -> Finding:
    by_governor: Dict[str, List[int]] = {}
    for path in (root / CPU).glob("cpu[0-9]*/cpufreq/scaling_governor"):
        governor = _read(root, path.relative_to(root))
        if governor:
            by_governor.setdefault(governor, []).append(int(path.parent.parent.name[3:]))
    if not by_governor:
        return Finding("cpu governor", "unreadable",
                       f"no /{CPU}/cpu*/cpufreq/scaling_governor (no cpufreq: a VM or container often has none)")
    seen = "; ".join(f"{governor} on {_cpu_ranges(cpus)}" for governor, cpus in sorted(by_governor.items()))
    if set(by_governor) != {"performance"}:
        return Finding("cpu governor", "poor", seen + ": clocks follow the load, so timings do",
                       "sudo cpupower frequency-set -g performance")
    return Finding("cpu governor", "ok", seen)


def check_turbo(root: Path) -> Finding:
    no_turbo, boost = _read(root, CPU / "intel_pstate/no_turbo"), _read(root, CPU / "cpufreq/boost")
    if no_turbo is not None:
        if no_turbo == "0":
            return Finding("turbo", "poor", "on (intel_pstate): clocks vary with heat and how many cores are busy",
                           f"echo 1 | sudo tee /{CPU}/intel_pstate/no_turbo")
        return Finding("turbo", "ok", "off (intel_pstate)")
    if boost is not None:
        if boost == "1":
            return Finding("turbo", "poor", "on (cpufreq boost): clocks vary with heat and how many cores are busy",
                           f"echo 0 | sudo tee /{CPU}/cpufreq/boost")
        return Finding("turbo", "ok", "off (cpufreq boost)")
    return _unreadable("turbo", CPU / "intel_pstate/no_turbo", CPU / "cpufreq/boost")


def check_swap(root: Path) -> Finding:
    text = _read(root, "proc/meminfo")
    fields = {}
    for line in (text or "").splitlines():
        name, _, value = line.partition(":")
        if value.split() and value.split()[0].isdigit():
            fields[name.strip()] = int(value.split()[0])  # kB
    if "SwapTotal" not in fields or "SwapFree" not in fields:
        return _unreadable("swap", "proc/meminfo")
    swaps = _read(root, "proc/swaps")
    devices = len((swaps or "").splitlines()[1:])
    used, total = (fields["SwapTotal"] - fields["SwapFree"]) // 1024, fields["SwapTotal"] // 1024
    where = f" on {devices} device(s)" if swaps is not None else ""
    if used > 0:
        return Finding("swap", "poor", f"{used} MiB of {total} MiB in use{where}: a page touched may wait for the disk",
                       "free memory, then sudo swapoff -a && sudo swapon -a (pages come back to RAM)")
    return Finding("swap", "ok", f"none in use ({total} MiB{where})" if total else "no swap")


def check_huge_pages(root: Path) -> Finding:
    path = Path("sys/kernel/mm/transparent_hugepage/enabled")
    text = _read(root, path)
    chosen = re.search(r"\[(\w+)\]", text or "")
    if not chosen:
        return _unreadable("transparent huge pages", path)
    if chosen.group(1) == "always":
        return Finding("transparent huge pages", "poor",
                       "always: khugepaged merges pages in the background, which shows as jitter",
                       f"echo madvise | sudo tee /{path}")
    return Finding("transparent huge pages", "ok", chosen.group(1))


def check_cpu_now(root: Path, seconds: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> List[Finding]:
    """CPU pressure (PSI ``some``) and steal over ``seconds``, read twice."""
    proc = root / "proc"
    pressure, ticks = host_watch.pressure_total_us(proc), host_watch.cpu_ticks(proc)
    started = time.monotonic()
    sleep(seconds)
    window = max(time.monotonic() - started, seconds, 1e-6)
    pressure_end, ticks_end = host_watch.pressure_total_us(proc), host_watch.cpu_ticks(proc)
    found = []
    if pressure is None or pressure_end is None:
        found.append(_unreadable("cpu pressure", "proc/pressure/cpu"))
    else:
        share = (pressure_end - pressure) / 1e6 / window
        seen = f"a task waited for a CPU {share:.0%} of the last {seconds:g} s"
        found.append(Finding("cpu pressure", "poor", seen, "see what runs (top -o %CPU) and stop it")
                     if share >= PRESSURE else Finding("cpu pressure", "ok", seen))
    if ticks is None or ticks_end is None:
        found.append(_unreadable("steal", "proc/stat"))
    else:
        total = ticks_end["total"] - ticks["total"]
        share = (ticks_end["steal"] - ticks["steal"]) / total if total > 0 else 0.0
        seen = f"{share:.0%} of the CPU time given to other guests over the last {seconds:g} s"
        found.append(Finding("steal", "poor", seen, "a dedicated (bare-metal or sole-tenant) host, or vCPUs "
                                                    "pinned to physical cores")
                     if share >= STEAL else Finding("steal", "ok", seen))
    return found


def check_gpus(smi: Optional[Smi] = None) -> List[Finding]:
    """Other GPU processes, persistence mode, SM clocks and throttle reasons, by ``nvidia-smi``."""
    if smi is None:
        from mxbench_train.telemetry import _nvidia_smi as smi
    apps, why = smi("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
    if apps is None:
        return [Finding("gpu", "n/a", f"no GPU tool ({why})")]
    found = []
    others = [[part.strip() for part in line.split(",", 2)] for line in apps.strip().splitlines() if line.strip()]
    if others:
        listed = ", ".join(f"{name} pid {pid} ({memory} MiB)" for pid, name, memory in others)
        found.append(Finding("gpu processes", "poor", f"{len(others)} running: {listed}",
                             "stop them, or run on other GPUs"))
    else:
        found.append(Finding("gpu processes", "ok", "none running"))
    gpus, why = smi("--query-gpu=index,persistence_mode,clocks.sm,clocks.max.sm,clocks_throttle_reasons.active",
                    "--format=csv,noheader,nounits")
    if gpus is None:
        return found + [Finding("gpu settings", "unreadable", f"nvidia-smi --query-gpu: {why}")]
    rows = [[part.strip() for part in line.split(",")] for line in gpus.strip().splitlines() if line.strip()]
    off = [index for index, persistence, *_ in rows if persistence.lower() != "enabled"]
    found.append(Finding("gpu persistence mode", "poor", f"off on GPU {', '.join(off)}: the driver reinitialises "
                                                         "each GPU when its first process starts",
                         "sudo nvidia-smi -pm 1") if off
                 else Finding("gpu persistence mode", "ok", "on"))
    for index, _, sm, max_sm, reasons in rows:
        try:
            held = int(reasons, 16) & ~THROTTLE_HARMLESS
        except ValueError:
            held = 0
        seen = f"GPU {index}: SM {sm} of {max_sm} MHz, throttle reasons {reasons}"
        found.append(Finding("gpu clocks", "poor", seen + " (held back: power cap or heat)",
                             f"check nvidia-smi -q -d PERFORMANCE; steady clocks: sudo nvidia-smi -i {index} "
                             f"-lgc {max_sm},{max_sm}")
                     if held else Finding("gpu clocks", "ok", seen))
    return found


def diagnose(root: Path = Path("/"), seconds: float = 1.0, smi: Optional[Smi] = None,
             sleep: Callable[[float], None] = time.sleep) -> List[Finding]:
    """Every check, in the order printed."""
    root = Path(root)
    return [check_load(root), check_governor(root), check_turbo(root), check_swap(root), check_huge_pages(root),
            *check_cpu_now(root, seconds, sleep), *check_gpus(smi)]


def report(findings: List[Finding]) -> str:
    poor = sum(f.status == "poor" for f in findings)
    unread = sum(f.status == "unreadable" for f in findings)
    head = (f"mxbench doctor: this machine as a benchmark host: {poor} poor, {unread} unreadable, "
            f"{len(findings) - poor - unread} ok or n/a")
    return "\n".join([head, *(f.line() for f in findings)])
