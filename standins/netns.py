"""Stand-in hosts with a network between them: Linux network namespaces joined by a shaped link.

What is real: each host is a network namespace of its own (its own stack, address, routes and
``lo``); its ``eth0`` is one end of a veth pair whose other end is a port of a bridge, and the
bridge lives in a namespace of its own (the "switch"). Every port is rate-limited with ``tbf`` in
both directions, like a NIC of that speed, so traffic between hosts crosses a shaped link. The
machine's own namespace (where Airflow runs) reaches the hosts through one more veth into the
bridge. Addresses come from the benchmarking range 198.18.0.0/15 (RFC 2544): one /24 per network,
one no route of this machine's own namespace already covers.

A network may also give every host more links (``links``: name -> rate), like a second NIC: each
another veth (``eth1``, ``eth2``, ...) into a bridge of its own in the switch namespace, shaped to
its rate, with a /24 of its own that only the hosts reach (the machine's own namespace keeps to the
first link, which carries SSH).

What is simplified: one machine's CPUs and memory serve every "host"; the link has a rate but no
delay or loss (this kernel has no ``netem``); the bridge is an ideal switch.

Everything is named with a prefix unique to this process and network (``mxb-<pid>-<n>``, root link
``mxb<pid>-<n>``; namespaces others make under it, like the Kubernetes stand-in's pods'
``<prefix>-pod<k>``, belong to the network too) and removed by ``Network.remove()`` (also a
context manager, and registered with atexit unless ``detach``). A process killed by a signal runs
no atexit: the next ``make()`` sweeps the networks whose process is gone (``sweep_orphans``). A
detached network (``mxbd-<pid>-<n>``, meant to outlive its maker, like the demo's hosts) is never
swept: its ``stop`` removes it.
Stdlib only; every ``ip``/``tc``/``bridge`` call is an argv (``run``), never a shell.
"""
from __future__ import annotations

import atexit
import ctypes
import ipaddress
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

BENCHMARK_RANGE = ipaddress.ip_network("198.18.0.0/15")
RATE = re.compile(r"^(\d+(?:\.\d+)?)(kbit|mbit|gbit)$")
_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
COMMAND_TIMEOUT_S = 10
_count = itertools.count(1)


def unavailable() -> Optional[str]:
    """None when namespaces can be made here; else a one-line reason."""
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/ns/net"):
        return f"needs Linux with network namespaces (this is {sys.platform})"
    if os.geteuid() != 0:
        return f"not root (uid {os.geteuid()}): making network namespaces needs root"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("nsenter", "util-linux")):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH: install {package}"
    return None


def rate_bits(rate: str) -> float:
    """'1gbit' -> 1e9; refuses anything tc would read otherwise."""
    m = RATE.match(rate)
    if not m:
        raise ValueError(f"link rate {rate!r}: expected a number and kbit, mbit or gbit, like 1gbit")
    return float(m.group(1)) * _UNITS[m.group(2)]


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """One ip/tc/bridge call (an argv, never a shell); RuntimeError with its message when it fails."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {(done.stderr or done.stdout).strip()}")
    return done


def free_subnet(start: int) -> ipaddress.IPv4Network:
    """A /24 of the benchmarking range that no route of this namespace covers yet."""
    routes = run("ip", "-4", "-o", "route", "show", "table", "all").stdout.split("\n")
    used = []
    for line in routes:
        word = line.split(" ", 1)[0]
        if word and word[0].isdigit():
            try:
                used.append(ipaddress.ip_network(word, strict=False))
            except ValueError:
                pass
    subnets = list(BENCHMARK_RANGE.subnets(new_prefix=24))
    for i in range(len(subnets)):
        candidate = subnets[(start + i) % len(subnets)]
        if not any(candidate.overlaps(u) for u in used if u.prefixlen > 0):
            return candidate
    raise RuntimeError(f"every /24 of {BENCHMARK_RANGE} is routed here already")


def kill_processes(namespace: str) -> None:
    """SIGKILL whatever still runs in ``namespace`` (it would keep the namespace and its devices alive)."""
    for pid in run("ip", "netns", "pids", namespace, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


_CLONE_NEWNET = 0x40000000


def listen_in(namespace: str, address: str, port: int) -> socket.socket:
    """A TCP socket listening on ``address:port`` inside ``namespace``: made by a thread of its own
    that enters the namespace (setns(2) moves only the calling thread) and ends there; a socket
    stays in the namespace it was made in, whichever thread uses it."""
    made: dict = {}

    def enter_and_listen() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        with open(f"/var/run/netns/{namespace}") as target:
            if libc.setns(target.fileno(), _CLONE_NEWNET) != 0:
                made["error"] = OSError(ctypes.get_errno(), f"setns into {namespace}")
                return
        try:
            made["socket"] = socket.create_server((address, port))
        except OSError as error:
            made["error"] = error

    thread = threading.Thread(target=enter_and_listen, name=f"listen-{namespace}")
    thread.start()
    thread.join()
    if "error" in made:
        raise RuntimeError(f"cannot listen on {address}:{port} in namespace {namespace}: {made['error']}")
    return made["socket"]


def _namespaces() -> list[str]:
    return [line.split()[0] for line in run("ip", "netns", "list").stdout.splitlines() if line.strip()]


def _burst(bits: float) -> str:
    """tbf's bucket: 1 ms at the rate, at least a 64 KiB GSO packet, so the bucket never caps it."""
    return str(max(int(bits / 8 / 1000), 65536))


def _shape(namespace: str, dev: str, rate: str, burst: str) -> None:
    run("tc", "-n", namespace, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", burst,
        "latency", "20ms")


@dataclass
class Network:
    """Hosts host1..hostN in namespaces ``<prefix>-host<i>``, a bridge in ``<prefix>-switch``."""

    prefix: str        # "mxb-<pid>-<n>" ("mxbd-..." detached): every namespace's name starts with it
    root_link: str     # "mxb<pid>-<n>" ("mxbd<pid>-<n>"): the veth in the machine's own namespace
    subnet: str        # "198.18.7.0/24"
    rate: str          # "1gbit": each host port's rate, each way
    count: int         # how many hosts
    # the hosts' other links, in order (eth1, eth2, ...): name -> {"rate": "4mbit", "subnet": "198.18.8.0/24"}
    links: dict = field(default_factory=dict)

    @property
    def switch(self) -> str:
        return f"{self.prefix}-switch"

    def namespace(self, i: int) -> str:
        """The namespace of host i (0-based)."""
        return f"{self.prefix}-host{i + 1}"

    @property
    def namespaces(self) -> list[str]:
        """The switch's and the hosts' namespaces, and any other made under this network's prefix
        (a pod's, standins.kube.network): every one of them goes with the network."""
        own = [self.switch] + [self.namespace(i) for i in range(self.count)]
        return own + [n for n in _namespaces() if n.startswith(self.prefix + "-") and n not in own]

    @property
    def root_address(self) -> str:
        return str(ipaddress.ip_network(self.subnet)[1])

    @property
    def addresses(self) -> list[str]:
        net = ipaddress.ip_network(self.subnet)
        return [str(net[2 + i]) for i in range(self.count)]

    def link_addresses(self, name: str) -> list[str]:
        """The hosts' addresses on their link ``name`` (of ``links``)."""
        net = ipaddress.ip_network(self.links[name]["subnet"])
        return [str(net[2 + i]) for i in range(self.count)]

    def exec_argv(self, i: int) -> list[str]:
        """Put before a command line to run it in host i's network namespace. Not `ip netns exec`:
        that also gives the command a mount namespace with a fresh /sys, without the cgroup mounts,
        and a host's roles then get no cgroup of their own (nor their own CPU pressure)."""
        return ["nsenter", f"--net=/var/run/netns/{self.namespace(i)}", "--"]

    def describe(self) -> str:
        others = "".join(f"; a second link '{name}' into a bridge of its own, shaped to {link['rate']}, addresses "
                         f"{link['subnet']}" for name, link in self.links.items())
        return (f"network namespaces joined by a bridge, each host's link shaped to {self.rate} each way "
                f"(tbf; no delay or loss), addresses {self.subnet}{others}")

    def to_json(self) -> dict:
        return {"kind": "netns", "rate": self.rate, "prefix": self.prefix, "root_link": self.root_link,
                "subnet": self.subnet, "count": self.count, "links": self.links}

    @classmethod
    def from_json(cls, d: dict) -> "Network":
        return cls(d["prefix"], d["root_link"], d["subnet"], d["rate"], int(d["count"]), d.get("links") or {})

    def set_rate(self, rate: str, host: Optional[int] = None) -> None:
        """Shape every host's (first) link to ``rate`` from now on, each way; with ``host`` (0-based),
        that host's alone (a fault: the network's ``rate`` stays what the others have)."""
        burst = _burst(rate_bits(rate))
        for i in range(self.count) if host is None else [host]:
            for where, dev in ((self.namespace(i), "eth0"), (self.switch, f"host{i + 1}")):
                _shape(where, dev, rate, burst)
        if host is None:
            self.rate = rate

    def set_link(self, i: int, up: bool) -> None:
        """Take host i's link down (its switch port) or bring it back."""
        run("ip", "-n", self.switch, "link", "set", f"host{i + 1}", "up" if up else "down")

    def existing(self) -> list[str]:
        """What of this network is still there: its namespaces and its root link."""
        left = [n for n in _namespaces() if n in self.namespaces]
        if run("ip", "link", "show", "dev", self.root_link, check=False).returncode == 0:
            left.append(self.root_link)
        return left

    def remove(self, deadline_s: float = 5.0) -> None:
        """Kill what still runs in the namespaces, delete them and the root link; idempotent."""
        namespaces = self.namespaces
        for ns in namespaces:
            kill_processes(ns)
        run("ip", "link", "del", "dev", self.root_link, check=False)
        for ns in namespaces:
            run("ip", "netns", "delete", ns, check=False)
        # the kernel frees the devices of a deleted namespace a moment later
        end = time.monotonic() + deadline_s
        while self.existing() and time.monotonic() < end:
            time.sleep(0.05)

    def __enter__(self) -> "Network":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


# what a network made without ``detach`` is called: the pid is that of the process it dies with
_OWNED_NAMESPACE = re.compile(r"^mxb-(\d+)-\d+-(switch|host\d+|pod\d+)$")
_OWNED_ROOT_LINK = re.compile(r"^mxb(\d+)-\d+$")


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def sweep_orphans() -> list[str]:
    """Remove the namespaces and root links of networks whose making process is gone (killed by a
    signal, so its atexit never ran); never a detached network's. Returns what it removed."""
    removed = []
    for ns in _namespaces():
        m = _OWNED_NAMESPACE.match(ns)
        if m and not _alive(int(m.group(1))):
            kill_processes(ns)
            run("ip", "netns", "delete", ns, check=False)
            removed.append(ns)
    for line in run("ip", "-o", "link", "show").stdout.splitlines():
        parts = line.split(":")
        link = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        m = _OWNED_ROOT_LINK.match(link)
        if m and not _alive(int(m.group(1))):
            run("ip", "link", "del", "dev", link, check=False)
            removed.append(link)
    return removed


def make(count: int = 2, rate: str = "1gbit", detach: bool = False, links: Optional[dict] = None) -> Network:
    """Make ``count`` host namespaces joined by a bridge, every port shaped to ``rate``; the
    machine's own namespace gets ``.1`` of the network's /24, the hosts ``.2``, ``.3``, ...
    ``links`` (name -> rate): more links of every host, each a bridge of its own (``_add_link``)."""
    reason = unavailable()
    if reason:
        raise RuntimeError(f"cannot make network namespaces: {reason}")
    bits = rate_bits(rate)
    for other in (links or {}).values():
        rate_bits(other)
    sweep_orphans()  # before choosing a subnet: an orphan's route would keep its /24 taken
    n = next(_count)
    pid = os.getpid()
    subnet = free_subnet(pid * 7 + n)
    kind = "mxbd" if detach else "mxb"  # a detached network outlives this pid: never an orphan
    net = Network(f"{kind}-{pid}-{n}", f"{kind}{pid}-{n}", str(subnet), rate, count)
    burst = _burst(bits)
    try:
        sw = net.switch
        run("ip", "netns", "add", sw)
        run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", sw, "link", "set", "br0", "up")
        run("ip", "link", "add", "name", net.root_link, "type", "veth", "peer", "name", "client", "netns", sw)
        run("ip", "-n", sw, "link", "set", "client", "master", "br0", "up")
        run("ip", "addr", "add", f"{net.root_address}/{subnet.prefixlen}", "dev", net.root_link)
        run("ip", "link", "set", net.root_link, "up")
        for i, address in enumerate(net.addresses):
            ns, port = net.namespace(i), f"host{i + 1}"
            run("ip", "netns", "add", ns)
            run("ip", "link", "add", "name", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", sw)
            run("ip", "-n", sw, "link", "set", port, "master", "br0", "up")
            run("ip", "-n", ns, "addr", "add", f"{address}/{subnet.prefixlen}", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")
            for where, dev in ((ns, "eth0"), (sw, port)):  # the host's sending and its receiving
                _shape(where, dev, rate, burst)
        for k, (name, other) in enumerate((links or {}).items(), start=1):
            _add_link(net, k, name, other)
    except BaseException:
        net.remove()
        raise
    if not detach:
        atexit.register(net.remove)
    return net


def _add_link(net: Network, k: int, name: str, rate: str) -> None:
    """Every host's ``eth<k>`` into bridge ``br<k>`` of the switch, each port shaped to ``rate``, on
    the k-th /24 after the network's: only the hosts are on it, so no route of this machine's own
    namespace can clash with it."""
    subnets = list(BENCHMARK_RANGE.subnets(new_prefix=24))
    subnet = subnets[(subnets.index(ipaddress.ip_network(net.subnet)) + k) % len(subnets)]
    net.links[name] = {"rate": rate, "subnet": str(subnet)}
    sw, bridge, burst = net.switch, f"br{k}", _burst(rate_bits(rate))
    run("ip", "-n", sw, "link", "add", bridge, "type", "bridge")
    run("ip", "-n", sw, "link", "set", bridge, "up")
    for i, address in enumerate(net.link_addresses(name)):
        ns, dev, port = net.namespace(i), f"eth{k}", f"host{i + 1}l{k}"
        run("ip", "link", "add", "name", dev, "netns", ns, "type", "veth", "peer", "name", port, "netns", sw)
        run("ip", "-n", sw, "link", "set", port, "master", bridge, "up")
        run("ip", "-n", ns, "addr", "add", f"{address}/{subnet.prefixlen}", "dev", dev)
        run("ip", "-n", ns, "link", "set", dev, "up")
        for where, side in ((ns, dev), (sw, port)):
            _shape(where, side, rate, burst)
