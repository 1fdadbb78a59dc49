"""This machine's identity, free ports and processes, as its kernel reports them (stdlib only).

The one place that parses ``/proc/<pid>/stat``: the launcher, the stand-ins, the tests and the
benchmarks all read processes through it.
"""
import os
import socket
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple


class ProcStat(NamedTuple):
    state: str  # R, S, D, Z (zombie), X (dead), ...
    ppid: int
    pgrp: int
    start_ticks: int  # clock ticks after boot: tells a process from a later one given its pid
    cpu_ticks: int = 0  # user + system CPU time so far, clock ticks
    children_ticks: int = 0  # user + system CPU time of its ended children that it waited for, clock ticks


def network_namespace() -> Optional[str]:
    """This process's network namespace ("net:[4026531840]"): hosts on one machine whose answers
    differ have network stacks of their own, with a link between them."""
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return None


SIOCGIFMTU, SIOCETHTOOL, ETHTOOL_GDRVINFO = 0x8921, 0x8946, 3


def interfaces() -> List[dict]:
    """This process's network interfaces, ``lo`` aside: {"name", "driver" (veth, vxlan, bridge, a
    NIC's driver: ethtool's GDRVINFO), "mtu"}, None where the kernel does not say. Read from
    /proc/net/dev and ioctls on a socket, both the reading process's network namespace's; not
    /sys/class/net, which shows the namespace that mounted /sys (a pod entered with nsenter --net
    would read its node's)."""
    import array
    import fcntl
    import struct

    try:
        with open("/proc/net/dev") as f:
            names = sorted(line.split(":", 1)[0].strip() for line in f.readlines()[2:])
    except OSError:
        return []
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in (n for n in names if n != "lo"):
            key = name.encode()[:15]
            try:  # struct ifreq: the name, then ifr_mtu
                mtu = struct.unpack_from("i", fcntl.ioctl(s, SIOCGIFMTU, struct.pack("16si20x", key, 0)), 16)[0]
            except OSError:
                mtu = None
            info = array.array("B", struct.pack("I", ETHTOOL_GDRVINFO) + bytes(192))  # struct ethtool_drvinfo
            try:  # struct ifreq: the name, then ifr_data pointing at it
                fcntl.ioctl(s, SIOCETHTOOL, struct.pack("16sP16x", key, info.buffer_info()[0]))
                driver = info.tobytes()[4:36].split(b"\0")[0].decode(errors="replace") or None
            except OSError:
                driver = None
            found.append({"name": name, "driver": driver, "mtu": mtu})
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now at ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def machine_id() -> str:
    """Which box this is (``/etc/machine-id``, else the boot id, else the host name): two
    addresses, or two pods, on one box share it, so a launcher can split the box's cores."""
    for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        try:
            with open(path) as f:
                value = f.read().strip()
        except OSError:
            continue
        if value:
            return value
    return socket.gethostname()


def pid_scope() -> str:
    """Where this process's pids mean something: host name and boot id. Pods on one node share
    the boot id, not the host name; a reboot changes the boot id."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}/{boot}"


def proc_stat(pid) -> Optional[ProcStat]:
    """Fields 3, 4, 5, 22, 14 + 15 and 16 + 17 of proc(5)'s ``/proc/<pid>/stat``; None when there is no such
    process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    fields = data[data.rindex(")") + 2:].split()  # the name before ")" may hold spaces and parens
    return ProcStat(fields[0], int(fields[1]), int(fields[2]), int(fields[19]), int(fields[11]) + int(fields[12]),
                    int(fields[13]) + int(fields[14]))


def name(pid) -> Optional[str]:
    """The process's command name (``/proc/<pid>/comm``), None when it is gone or hidden."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def ancestors(pid: int) -> List[int]:
    """The processes above ``pid`` by parent links, its parent first, up to init."""
    found, stat = [], proc_stat(pid)
    while stat is not None and stat.ppid > 0 and stat.ppid not in found:
        found.append(stat.ppid)
        stat = proc_stat(stat.ppid)
    return found


def start_ticks(pid) -> Optional[int]:
    stat = proc_stat(pid)
    return stat.start_ticks if stat else None


def is_running(pid, start: Optional[int] = None) -> bool:
    """The process exists and is not a zombie; when ``start`` (its start ticks) is given, it is
    still that process and not a later one with a reused pid."""
    stat = proc_stat(pid)
    return stat is not None and stat.state not in "ZXx" and (start is None or stat.start_ticks == start)


def processes() -> Iterator[Tuple[int, ProcStat]]:
    """(pid, stat) of every process there is now."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(entry)
            if stat is not None:
                yield int(entry), stat


def descendants(pid: int) -> List[int]:
    """Every process below ``pid`` by parent links (a process group or session would miss those
    that started their own)."""
    children: Dict[int, List[int]] = {}
    for child, stat in processes():
        children.setdefault(stat.ppid, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def group_members(pgid: int) -> List[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    return [pid for pid, stat in processes() if stat.pgrp == pgid and stat.state != "Z"]
