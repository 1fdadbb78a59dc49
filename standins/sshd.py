"""Real OpenSSH servers as stand-in remote machines for the SSH launcher.

Each "host" is its own ``sshd -D`` process with its own ed25519 host key, its own work folder and
public-key authentication only. By default it listens on one loopback address (127.0.0.1,
127.0.0.2, ...) and a free port: the hosts share one network stack and no traffic between them
crosses a link. With ``link_rate`` (e.g. "1gbit") each host is instead a network namespace of its
own (``standins.netns``), listening on port 22 of its 198.18.x.y address, the hosts joined by a
link shaped to that rate, so what their roles send each other crosses it; ``links`` (name -> rate,
e.g. {"slow": "4mbit"}) gives every host another link of its own rate, a second NIC, which each
connection lists in its extra ``mxbench_links`` (a variant that names the link runs over it). Where namespaces cannot
be made, the fleet falls back to loopback hosts and ``fleet.network`` says why. One client key
(ed25519, no passphrase) is authorized on all of them. Stdlib only (and ``mxbench_train.localhost``
and ``standins.netns``, stdlib only); no Airflow import.

Library use (tests)::

    fleet = start(tmp_path)            # two hosts: 127.0.0.1 and 127.0.0.2
    fleet = start(tmp_path, link_rate="1gbit")   # two namespaces, a 1 Gbit/s link (or loopback, why)
    try:
        os.environ.update(fleet.airflow_env())   # AIRFLOW_CONN_MXBENCH_SSH_1, ..._2
        ...
    finally:
        fleet.stop()                   # the sshds and everything their sessions started

Shell use (demo)::

    eval "$(python -m standins.sshd start --root /tmp/fleet [--link-rate 1gbit])"   # idempotent
    python -m standins.sshd stop --root /tmp/fleet
    python -m standins.sshd check                               # "ok" or why not

Layout under ROOT: ``client_key`` (+ ``.pub``), ``authorized_keys``, ``fleet.json`` (CLI), and
per host ``<name>/sshd_config``, ``<name>/ssh_host_ed25519_key``, ``<name>/sshd.pid``,
``<name>/sshd.log`` and ``<name>/work/``.

Needs root (sshd's privilege separation wants /run/sshd and the ``sshd`` user; PAM is off, so
the login user's account must not be locked with a ``!`` password).
"""
from __future__ import annotations

import argparse
import ctypes
import getpass
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from mxbench_train import localhost
from standins import netns

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")
DEFAULT_ADDRESSES = ("127.0.0.1", "127.0.0.2")
DEFAULT_CONN_IDS = ("mxbench_ssh_1", "mxbench_ssh_2")
NAMESPACE_PORT = 22  # a host's own namespace has every port free
START_DEADLINE_S = 10.0
PORT_TRIES = 5


def _ssh_keygen() -> Optional[str]:
    return shutil.which("ssh-keygen") or next(
        (p for p in ("/usr/bin/ssh-keygen", "/bin/ssh-keygen") if os.access(p, os.X_OK)), None)


def unavailable(user: Optional[str] = None) -> Optional[str]:
    """None when loopback sshd hosts can be started here; else a one-line reason."""
    if not sys.platform.startswith("linux") or not Path("/proc/self/stat").exists():
        return f"needs Linux with /proc (this is {sys.platform})"
    if not os.access(SSHD, os.X_OK):
        return f"no {SSHD}: install openssh-server (scripts/setup.sh does it when run as root)"
    if _ssh_keygen() is None:
        return "no ssh-keygen: install openssh-client (scripts/setup.sh does it when run as root)"
    if os.geteuid() != 0:
        return f"not root (uid {os.geteuid()}): sshd's privilege separation needs root"
    try:
        pwd.getpwnam("sshd")
    except KeyError:
        return "no 'sshd' privilege separation user (reinstall openssh-server)"
    user = user or getpass.getuser()
    try:
        pwd.getpwnam(user)
    except KeyError:
        return f"no such user {user!r}"
    locked = _locked(user)
    if locked:
        return locked
    return None


def _locked(user: str) -> Optional[str]:
    """sshd with UsePAM no refuses accounts whose shadow password starts with '!'."""
    try:
        for line in Path("/etc/shadow").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == user:
                if rest.startswith("!"):
                    return (f"account {user!r} is locked ('!' password in /etc/shadow); sshd without "
                            f"PAM refuses it: `usermod -p '*' {user}` unlocks it for key logins")
                return None
    except OSError:
        pass
    return None


def _sshd_version() -> tuple[int, int]:
    done = subprocess.run([SSHD, "-V"], capture_output=True, text=True, timeout=10)
    m = re.search(r"OpenSSH_(\d+)\.(\d+)", done.stdout + done.stderr)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# ---------------------------------------------------------------------------- processes

def _session_pids(address: str, port: int) -> list[int]:
    """Processes whose SSH_CONNECTION says they came in through address:port, wherever they
    were reparented to (sshd's per-connection children call setsid(), so killpg misses them)."""
    tail = f" {address} {port}".encode()
    out = []
    for p, _ in localhost.processes():
        try:
            env = Path(f"/proc/{p}/environ").read_bytes()
        except OSError:
            continue
        for var in env.split(b"\0"):
            if var.startswith(b"SSH_CONNECTION=") and var.endswith(tail):
                out.append(p)
                break
    return out


def _starttimes(pids: Iterable[int]) -> dict[int, int]:
    """{pid: starttime} of those still there, never this process."""
    out = {}
    for p in pids:
        start = localhost.start_ticks(p)
        if start is not None and p != os.getpid():
            out[p] = start
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _looks_like_sshd(pid: int, config: Path) -> bool:
    cmd = _cmdline(pid)
    return "sshd" in cmd and str(config) in cmd


def _kill(pids: dict[int, int], deadline_s: float = 3.0) -> None:
    """SIGTERM {pid: starttime}, wait, then SIGKILL what is still the same process."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = {p: t for p, t in pids.items() if localhost.is_running(p, t)}
        for p in live:
            try:
                os.kill(p, sig)
            except (ProcessLookupError, PermissionError):
                pass
        end = time.monotonic() + deadline_s
        while live and time.monotonic() < end:
            time.sleep(0.02)
            live = {p: t for p, t in live.items() if localhost.is_running(p, t)}
        if not live:
            return


# ---------------------------------------------------------------------------- model

@dataclass
class Host:
    name: str          # "host1", "host2"
    address: str       # "127.0.0.1", "127.0.0.2"
    port: int          # the port sshd listens on at address
    pid: int           # the sshd listener's pid (sshd -D, our child when started by the library)
    host_key: str      # public host key line "ssh-ed25519 AAAA..." (connection extra `host_key`)
    workdir: Path      # <root>/<name>/work: this host's own work folder
    starttime: int = 0  # /proc/<pid>/stat starttime, to tell the pid from a reused one

    @property
    def config(self) -> Path:
        return self.workdir.parent / "sshd_config"

    @property
    def log(self) -> Path:
        return self.workdir.parent / "sshd.log"

    def alive(self) -> bool:
        """The listener is still this sshd (same pid, start time and config)."""
        return localhost.is_running(self.pid, self.starttime or None) and _looks_like_sshd(self.pid, self.config)

    def to_json(self) -> dict:
        return {"name": self.name, "address": self.address, "port": self.port, "pid": self.pid,
                "host_key": self.host_key, "workdir": str(self.workdir), "starttime": self.starttime}

    @classmethod
    def from_json(cls, d: dict) -> "Host":
        return cls(d["name"], d["address"], int(d["port"]), int(d["pid"]), d["host_key"],
                   Path(d["workdir"]), int(d.get("starttime", 0)))


@dataclass
class Fleet:
    root: Path
    user: str
    client_key: Path   # private key (ed25519, no passphrase) authorized on every host
    hosts: list[Host]
    # {"kind": "loopback"} (asked for), {"kind": "loopback", "why": ...} (namespaces could not be
    # made) or standins.netns.Network.to_json() ({"kind": "netns", "rate": "1gbit", ...})
    network: dict = field(default_factory=lambda: {"kind": "loopback"})
    _procs: dict = field(default_factory=dict, repr=False, compare=False)  # pid -> Popen (ours)

    def describe_network(self) -> Optional[str]:
        """What the hosts' traffic crosses, for the connections' extra mxbench_network; None for
        loopback hosts nobody asked to be anything else."""
        if self.network["kind"] == "netns":
            return netns.Network.from_json(self.network).describe()
        if self.network.get("why"):
            return ("loopback addresses of one network stack, no link between the hosts "
                    f"(network namespaces could not be made: {self.network['why']})")
        return None

    def connection(self, i: int, **extra) -> dict:
        """Host i as an Airflow connection dict (the JSON form of AIRFLOW_CONN_*)."""
        h = self.hosts[i]
        network = self.describe_network()
        return {"conn_type": "ssh", "host": h.address, "port": h.port, "login": self.user,
                "extra": {"key_file": str(self.client_key), "host_key": h.host_key,
                          "look_for_keys": "false", "mxbench_workdir": str(h.workdir),
                          **({"mxbench_network": network} if network else {}),
                          **({"mxbench_link_rate": self.network["rate"]} if self.network["kind"] == "netns" else {}),
                          **({"mxbench_links": self.links_of(i)} if self.network.get("links") else {}),
                          **extra}}

    def links_of(self, i: int) -> dict:
        """Host i's other links as its connection's ``mxbench_links``: name -> {address, rate}."""
        network = netns.Network.from_json(self.network)
        return {name: {"address": network.link_addresses(name)[i], "rate": link["rate"]}
                for name, link in network.links.items()}

    def airflow_env(self, conn_ids: Iterable[str] = DEFAULT_CONN_IDS, **extra) -> dict[str, str]:
        """{"AIRFLOW_CONN_<ID>": json of connection(i)} for the first len(conn_ids) hosts."""
        conn_ids = list(conn_ids)
        if len(conn_ids) > len(self.hosts):
            raise ValueError(f"{len(conn_ids)} connection ids for {len(self.hosts)} hosts")
        return {f"AIRFLOW_CONN_{cid.upper()}": json.dumps(self.connection(i, **extra))
                for i, cid in enumerate(conn_ids)}

    def alive(self) -> bool:
        return bool(self.hosts) and all(h.alive() for h in self.hosts)

    def stop(self) -> None:
        """Stop every sshd of the fleet and whatever its sessions started; idempotent."""
        for h in self.hosts:
            proc = self._procs.get(h.pid)
            running = (proc is not None and proc.poll() is None) or h.alive()
            if proc is None and not running:
                continue  # a recorded listener that is gone: its address:port may be someone else's now
            victims: dict[int, int] = {}
            if running:
                victims[h.pid] = h.starttime or localhost.start_ticks(h.pid) or 0
                victims.update(_starttimes(localhost.descendants(h.pid)))
            victims.update(_starttimes(_session_pids(h.address, h.port)))
            _kill(victims)
            if proc is not None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            _kill(_starttimes(_session_pids(h.address, h.port)), deadline_s=1.0)  # forked meanwhile
        self._procs.clear()
        if self.network["kind"] == "netns":
            netns.Network.from_json(self.network).remove()

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def to_json(self, conn_ids: Iterable[str] = DEFAULT_CONN_IDS, **extra) -> dict:
        conn_ids = list(conn_ids)[:len(self.hosts)]
        return {"root": str(self.root), "user": self.user, "client_key": str(self.client_key),
                "hosts": [h.to_json() for h in self.hosts], "network": self.network,
                "connections": {cid: self.connection(i, **extra) for i, cid in enumerate(conn_ids)}}

    @classmethod
    def load(cls, root: Path) -> Optional["Fleet"]:
        """The fleet a CLI `start` recorded in root/fleet.json, or None."""
        try:
            d = json.loads((Path(root) / "fleet.json").read_text())
            return cls(Path(d["root"]), d["user"], Path(d["client_key"]),
                       [Host.from_json(h) for h in d["hosts"]], d.get("network") or {"kind": "loopback"})
        except (OSError, ValueError, KeyError, TypeError):
            return None


# ---------------------------------------------------------------------------- starting

def _keygen(path: Path, comment: str) -> None:
    if path.exists() and path.with_name(path.name + ".pub").exists():
        return
    for p in (path, path.with_name(path.name + ".pub")):
        p.unlink(missing_ok=True)
    done = subprocess.run([_ssh_keygen(), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"ssh-keygen for {path} failed: {done.stderr.strip()}")


def _config_text(hostdir: Path, address: str, port: int, root: Path, version: tuple[int, int]) -> str:
    lines = [
        f"ListenAddress {address}:{port}",
        f"HostKey {hostdir / 'ssh_host_ed25519_key'}",
        f"PidFile {hostdir / 'sshd.pid'}",
        f"AuthorizedKeysFile {root / 'authorized_keys'}",
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "HostbasedAuthentication no",
        "PermitEmptyPasswords no",
        "UsePAM no",
        "StrictModes no",
        "PermitRootLogin prohibit-password",
        "PermitUserEnvironment no",
        "MaxSessions 64",
        "MaxStartups 64",
        "LoginGraceTime 30",
        "UseDNS no",
        "LogLevel ERROR",
        "Subsystem sftp internal-sftp",
        "ClientAliveInterval 5",
        "ClientAliveCountMax 2",
        "PrintMotd no",
        "PrintLastLog no",
        "X11Forwarding no",
    ]
    if version >= (9, 8):
        # Newer sshd penalizes sources with failed logins by refusing them for a while; tests fail
        # logins on purpose, all from 127.0.0.1.
        lines.append("PerSourcePenalties no")
    return "\n".join(lines) + "\n"


def _read_banner(address: str, port: int, timeout: float = 1.0) -> bytes:
    with socket.create_connection((address, port), timeout=timeout) as s:
        data = b""
        while b"\n" not in data and len(data) < 512:
            chunk = s.recv(256)
            if not chunk:
                break
            data += chunk
        if data.startswith(b"SSH-"):
            try:  # answer in kind so that sshd does not log the probe as an error
                s.sendall(b"SSH-2.0-mxbench_probe\r\n")
            except OSError:
                pass
        return data


def _log_tail(log: Path, n: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _start_host(root: Path, name: str, address: str, version: tuple[int, int], detach: bool,
                namespace_argv: tuple[str, ...] = ()):
    """namespace_argv: run sshd in that network namespace (``nsenter --net=...``, which execs it:
    the pid stays sshd's), on NAMESPACE_PORT; else on a free port of a loopback address."""
    hostdir = root / name
    workdir = hostdir / "work"
    workdir.mkdir(parents=True, exist_ok=True)
    key = hostdir / "ssh_host_ed25519_key"
    _keygen(key, f"mxbench-{name}")
    host_key = " ".join(key.with_name(key.name + ".pub").read_text().split()[:2])
    config, pidfile, log = hostdir / "sshd_config", hostdir / "sshd.pid", hostdir / "sshd.log"

    failure = ""
    for _ in range(1 if namespace_argv else PORT_TRIES):
        port = NAMESPACE_PORT if namespace_argv else localhost.free_port(address)
        config.write_text(_config_text(hostdir, address, port, root, version))
        test = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
        if test.returncode != 0:
            raise RuntimeError(f"sshd -t rejects {config}: {(test.stderr or test.stdout).strip()}")
        pidfile.unlink(missing_ok=True)
        log.write_text("")
        with open(log, "ab") as err:
            proc = subprocess.Popen([*namespace_argv, SSHD, "-D", "-E", str(log), "-f", str(config)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                    start_new_session=True, close_fds=True,
                                    preexec_fn=None if detach else _die_with_parent)
        deadline = time.monotonic() + START_DEADLINE_S
        ready = False
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            # sshd writes its pid file only once it listens: then the banner is surely ours.
            try:
                listening = pidfile.read_text().strip() == str(proc.pid)
            except OSError:
                listening = False
            if listening:
                try:
                    if _read_banner(address, port).startswith(b"SSH-2.0-"):
                        ready = True
                        break
                except OSError:
                    pass
            time.sleep(0.02)
        if ready:
            return Host(name, address, port, proc.pid, host_key, workdir, localhost.start_ticks(proc.pid) or 0), proc
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        failure = _log_tail(log)
        if not re.search(r"[Aa]ddress already in use|Cannot bind", failure):
            break
    raise RuntimeError(f"sshd for {name} on {address} did not come up; {log} says:\n{failure}")


def start(root: Path, addresses: Iterable[str] = DEFAULT_ADDRESSES, user: Optional[str] = None,
          detach: bool = False, link_rate: Optional[str] = None, links: Optional[dict] = None) -> Fleet:
    """Start one sshd per address ("host1", "host2", ...) under root; the Fleet to stop them.

    link_rate (e.g. "1gbit"): as many hosts as addresses, each in a network namespace of its own
    joined by links of that rate (the addresses then are the namespaces'); where namespaces cannot
    be made, the loopback addresses, with the reason in ``fleet.network["why"]``. ``links`` (name ->
    rate; with link_rate): every host's other links (``netns.make``).

    detach=False (library): each sshd also gets SIGTERM when the thread that called start()
    exits (PR_SET_PDEATHSIG), so a killed test run does not leave listeners behind.
    detach=True (CLI): the sshds outlive this process; stop them with Fleet.stop() / `stop`."""
    user = user or getpass.getuser()
    reason = unavailable(user)
    if reason:
        raise RuntimeError(f"cannot start loopback sshd: {reason}")
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    client_key = root / "client_key"
    _keygen(client_key, "mxbench-client")
    (root / "authorized_keys").write_text(client_key.with_name("client_key.pub").read_text())
    version = _sshd_version()
    addresses = list(addresses)
    fleet = Fleet(root, user, client_key, [])
    network = None
    if link_rate is not None:
        netns.rate_bits(link_rate)  # a wrong rate is the caller's mistake, not a reason to fall back
        try:
            network = netns.make(len(addresses), link_rate, detach=detach, links=links)
        except RuntimeError as e:
            fleet.network = {"kind": "loopback", "why": str(e)}
    if network is not None:
        fleet.network = network.to_json()
        addresses = network.addresses
    try:
        for i, address in enumerate(addresses):
            host, proc = _start_host(root, f"host{i + 1}", address, version, detach,
                                     tuple(network.exec_argv(i)) if network else ())
            fleet.hosts.append(host)
            fleet._procs[host.pid] = proc
    except BaseException:
        fleet.stop()
        raise
    return fleet


# ---------------------------------------------------------------------------- CLI

def _exports(env: dict[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def _same_network(fleet: Fleet, addresses: list[str], link_rate: Optional[str], links: dict) -> bool:
    """The recorded fleet is what this `start` asks for (a fallback is asked again)."""
    if link_rate is None:
        return fleet.network == {"kind": "loopback"} and [h.address for h in fleet.hosts] == addresses
    recorded = {name: link["rate"] for name, link in (fleet.network.get("links") or {}).items()}
    return fleet.network.get("rate") == link_rate and len(fleet.hosts) == len(addresses) and recorded == links


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m standins.sshd",
                                 description="sshd hosts standing in for remote machines.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("start", help="start (or reuse) a fleet; print `export AIRFLOW_CONN_...` lines")
    st.add_argument("--root", required=True, type=Path)
    st.add_argument("--conn-ids", default=",".join(DEFAULT_CONN_IDS))
    st.add_argument("--extra", default="{}", help="JSON object merged into each connection's extra")
    st.add_argument("--addresses", default=",".join(DEFAULT_ADDRESSES))
    st.add_argument("--user", default=None)
    st.add_argument("--link-rate", default=None,
                    help="hosts in network namespaces joined by links of this rate (e.g. 1gbit); "
                         "loopback addresses where namespaces cannot be made")
    st.add_argument("--link", action="append", default=[], metavar="NAME=RATE",
                    help="with --link-rate: every host gets another link NAME of this rate (e.g. slow=4mbit), "
                         "listed in its connection's mxbench_links")
    sp = sub.add_parser("stop", help="stop the fleet recorded in ROOT/fleet.json")
    sp.add_argument("--root", required=True, type=Path)
    sub.add_parser("check", help='print "ok" or why sshd cannot be started here')
    sd = sub.add_parser("describe", help="one line: the recorded fleet's hosts and the network between them")
    sd.add_argument("--root", required=True, type=Path)
    args = ap.parse_args(argv)

    if args.cmd == "check":
        reason = unavailable()
        print(reason or "ok")
        return 1 if reason else 0

    root = args.root.resolve()
    if args.cmd == "describe":
        fleet = Fleet.load(root)
        if fleet is None:
            print(f"mxbench: no fleet recorded in {root / 'fleet.json'}", file=sys.stderr)
            return 1
        network = fleet.describe_network() or "loopback addresses of one network stack, no link between the hosts"
        print(f"sshd on {' and '.join(h.address for h in fleet.hosts)}: {network}")
        return 0
    if args.cmd == "stop":
        fleet = Fleet.load(root)
        if fleet is None:
            print(f"mxbench: no fleet recorded in {root / 'fleet.json'}", file=sys.stderr)
            return 0
        fleet.stop()
        (root / "fleet.json").unlink(missing_ok=True)
        return 0

    conn_ids = [c for c in args.conn_ids.split(",") if c]
    extra = json.loads(args.extra)
    if not isinstance(extra, dict):
        ap.error("--extra must be a JSON object")
    addresses = [a for a in args.addresses.split(",") if a]
    links = dict(link.split("=", 1) for link in args.link if "=" in link)
    if len(links) != len(args.link):
        ap.error("--link is NAME=RATE, like slow=4mbit")
    if links and args.link_rate is None:
        ap.error("--link needs --link-rate: the other links are beside the shaped default one")
    fleet = Fleet.load(root)
    if fleet is not None and fleet.alive() and _same_network(fleet, addresses, args.link_rate, links) \
            and (args.user is None or args.user == fleet.user):
        pass  # reuse
    else:
        if fleet is not None:
            fleet.stop()
        try:
            fleet = start(root, addresses, user=args.user, detach=True, link_rate=args.link_rate,
                          links=links)
        except RuntimeError as e:
            print(f"mxbench: {e}", file=sys.stderr)
            return 1
    try:
        env = fleet.airflow_env(conn_ids, **extra)
    except ValueError as e:
        ap.error(str(e))
    tmp = root / "fleet.json.tmp"
    tmp.write_text(json.dumps(fleet.to_json(conn_ids, **extra), indent=2) + "\n")
    tmp.replace(root / "fleet.json")
    sys.stdout.write(_exports(env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
