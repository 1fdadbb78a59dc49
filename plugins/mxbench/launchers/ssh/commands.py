"""The SSH launcher's pure part: a host's settings and every command line it runs there.

Nothing here opens a connection: ``ssh.py`` runs these lines over SSH. Every value that reaches a
remote shell is quoted (``shlex``); what a connection's extra may hold is checked here, by name.
"""
import ipaddress
import json
import os
import posixpath
import re
import shlex
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

from mxbench.builds.record import RunBuild
from mxbench.launchers.base import LOCAL_ONLY
from mxbench.run_folder import RunFolder
from mxbench_train.errors import MxbenchError
from mxbench_train.role_plan import Role

DATA_FILES = ("cifar10_train.rec", "cifar10_train.idx", "cifar10_val.rec", "cifar10_val.idx")
DEFAULT_WORKDIR = "~/.cache/mxbench"  # under the SSH user's home, resolved there; never shared territory
HEARTBEAT_S = 2.0  # the launcher writes a byte to each role's channel this often...
HEARTBEAT_TIMEOUT_S = 30.0  # ...and its supervisor stops the role after this long without one
# A link that goes silent (down, or throttled to a trickle) ends the connection after this long,
# not after the kernel's retransmissions (about 15 minutes): as long as a role's supervisor waits
# for a heartbeat, so both ends give up together.
LINK_SILENCE_S = HEARTBEAT_TIMEOUT_S
LINK_CHECK_S = 3.0  # how long a lost connection's host may take to answer a new one
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LINK_RATE = re.compile(r"^(\d+(?:\.\d+)?)(kbit|mbit|gbit|)$")
RATE_UNITS = {"": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
LINK_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


@dataclass(frozen=True)
class SshHost:
    """One training host: plain settings from its Airflow connection; no secrets."""

    conn_id: str
    address: str  # the IP its roles bind and the others reach (ps-lite binds it itself)
    python: str = "python3"  # the training interpreter there, with mxbench_train installed
    workdir: str = DEFAULT_WORKDIR
    data_dir: Optional[str] = None  # a shared folder with the prepared files: used as is
    env: Dict[str, str] = field(default_factory=dict)  # added to every role's environment there
    checks_host_key: bool = True  # False only where the connection turns checking off explicitly
    keep_failed_runs: bool = False  # mxbench_keep_failed_runs: a failed run's folder stays there, to look into
    # opens an authenticated paramiko SSHClient (SSHHook.get_conn); holds the credentials
    connect: Optional[Callable] = field(default=None, repr=False, compare=False)
    # mxbench_builds: a prebuilt interpreter per MXNet build ("1.9.0" or "mxnet-cu112==1.9.0" -> path);
    # a host that has them makes no venvs (it may have no package index)
    builds: Dict[str, str] = field(default_factory=dict)
    # mxbench_network: what the host's traffic crosses, in words, for the report's conditions
    network: Optional[str] = None
    # mxbench_link_rate: the rate of the host's link, each way, bits/s (the scaling model's network term)
    link_bits: Optional[float] = None
    # mxbench_links: the host's other links (a second NIC): name -> (its address there, its rate in bits/s)
    links: Dict[str, Tuple[str, float]] = field(default_factory=dict)

    def __str__(self):
        return f"host {self.conn_id} ({self.address})"

    def over(self, link: str) -> "SshHost":
        """This host as its roles run over its link ``link`` (of ``mxbench_links``; "" the default one)."""
        if not link:
            return self
        address, bits = self.links[link]
        return replace(self, address=address, link_bits=bits)

    def python_for(self, build: RunBuild) -> Optional[str]:
        """The ``mxbench_builds`` interpreter of ``build`` (by its package, else its version)."""
        return self.builds.get(build.package) or self.builds.get(build.version)


def host_settings(conn_id: str, host: str, extra: dict, connect=None, checks_host_key: bool = True) -> SshHost:
    """An SshHost from a connection's host and extra; refuses values that could not work."""
    where = f"ssh connection {conn_id!r}"
    address = str(extra.get("mxbench_address") or host or "")
    try:
        address = str(ipaddress.ip_address(address))
    except ValueError:
        try:  # a name: the roles need the address the host owns, not a name (ps-lite binds it)
            address = socket.gethostbyname(address)
        except (OSError, UnicodeError):
            raise MxbenchError(f"{where}: cannot resolve host {address!r}; set an IP in its extra "
                               "mxbench_address") from None
    python = str(extra.get("mxbench_python") or "python3")
    if python.startswith("-") or "=" in python or not _plain(python):
        raise MxbenchError(f"{where}: mxbench_python {python!r} is not an interpreter path")
    workdir = _workdir(extra.get("mxbench_workdir") or DEFAULT_WORKDIR, f"{where}: mxbench_workdir")
    data_dir = extra.get("mxbench_data_dir")
    data_dir = _absolute(data_dir, f"{where}: mxbench_data_dir") if data_dir else None
    env = _object_extra(extra, "mxbench_env")
    if not isinstance(env, dict) or not all(isinstance(k, str) and _ENV_NAME.match(k) and _one_line(str(v))
                                            for k, v in env.items()):
        raise MxbenchError(f"{where}: mxbench_env must be an object of variable names to one-line values")
    keep = extra.get("mxbench_keep_failed_runs", False)
    if str(keep).strip().lower() not in ("true", "false", "1", "0", "yes", "no", ""):
        raise MxbenchError(f"{where}: mxbench_keep_failed_runs must be true or false, not {keep!r}")
    builds = _object_extra(extra, "mxbench_builds")
    if not isinstance(builds, dict) or not all(isinstance(k, str) and k for k in builds):
        raise MxbenchError(f'{where}: mxbench_builds must be an object of MXNet builds to interpreter paths, '
                           f'like {{"1.9.0": "/opt/mxnet-1.9.0/bin/python"}}')
    builds = {k: _absolute(v, f"{where}: mxbench_builds[{k!r}]") for k, v in builds.items()}
    network = str(extra.get("mxbench_network") or "").strip() or None
    if network and not _one_line(network):
        raise MxbenchError(f"{where}: mxbench_network must be one line of text")
    return SshHost(conn_id, address, python, workdir, data_dir, {k: str(v) for k, v in env.items()},
                   checks_host_key, str(keep).strip().lower() in ("true", "1", "yes"), connect, builds, network,
                   link_bits(extra.get("mxbench_link_rate"), where), other_links(extra, where))


def other_links(extra: dict, where: str) -> Dict[str, Tuple[str, float]]:
    """``mxbench_links``: the host's other links, name -> (IP address, bits/s), from an object like
    {"slow": {"address": "198.18.9.2", "rate": "4mbit"}}; a variant with ``link`` "slow" runs over it."""
    links = _object_extra(extra, "mxbench_links")
    if not isinstance(links, dict) or not all(isinstance(k, str) and LINK_NAME.match(k) and isinstance(v, dict)
                                              for k, v in links.items()):
        raise MxbenchError(f'{where}: mxbench_links must be an object of link names (letters, digits, _ -) to '
                           f'{{"address": IP, "rate": "4mbit"}}')
    found = {}
    for name, link in links.items():
        try:
            address = str(ipaddress.ip_address(str(link.get("address"))))
        except ValueError:
            raise MxbenchError(f"{where}: mxbench_links[{name!r}] needs the IP address the host has on that link, "
                               f"not {link.get('address')!r}") from None
        bits = link_bits(link.get("rate"), f"{where}: mxbench_links[{name!r}]")
        if bits is None:
            raise MxbenchError(f"{where}: mxbench_links[{name!r}] needs its rate (like 4mbit)")
        found[name] = (address, bits)
    return found


def link_bits(rate, where: str) -> Optional[float]:
    """``mxbench_link_rate`` in bits/s: tc's notation ("10mbit", "1gbit") or a number of bits/s;
    None where the connection states none."""
    if rate is None or str(rate).strip() == "":
        return None
    m = LINK_RATE.match(str(rate).strip().lower())
    bits = float(m.group(1)) * RATE_UNITS[m.group(2)] if m else 0.0
    if not bits > 0:
        raise MxbenchError(f"{where}: mxbench_link_rate {rate!r} is not a rate (like 1gbit, 10mbit, or bits/s)")
    return bits


def builds_problem(host: SshHost, build: Optional[RunBuild]) -> Optional[str]:
    """Why ``host`` cannot run ``build``, or None. A host with ``mxbench_builds`` runs only those;
    any other makes the build's venv itself, from the package index its pip reaches, so it cannot
    install a wheel that is a file on the Airflow worker."""
    if build is None:
        return None
    where = f"ssh connection {host.conn_id!r}"
    if host.builds:
        if host.python_for(build):
            return None
        return (f"{where}: its mxbench_builds has no interpreter for {build} (it lists "
                f"{', '.join(sorted(host.builds))}); a host with mxbench_builds makes no venvs")
    if not build.spec:
        return f"{where}: {build} has no install spec to make its venv there from"
    local = [line for line in build.spec if "file:" in line]
    if local:
        return (f"{where}: {build} installs a file of the Airflow worker ({local[0][:200]}), which the host cannot "
                "read: give the host an interpreter for it in mxbench_builds")
    return None


def _object_extra(extra: dict, key: str):
    """An extra that holds an object, given as one or as its JSON text (the UI's form); None when
    the text is not JSON."""
    value = extra.get(key) or {}
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _one_line(text: str) -> bool:
    """An empty value is fine (``PIP_FIND_LINKS=`` turns a setting off)."""
    return not any(c in text for c in "\0\n\r")


def _plain(text: str) -> bool:
    return bool(text) and not any(c in text for c in "\0\n\r")


def _absolute(path, what) -> str:
    path = str(path)
    if not _plain(path) or not path.startswith("/"):
        raise MxbenchError(f"{what} {path!r} must be an absolute path on the host")
    return posixpath.normpath(path)


def _workdir(path, what) -> str:
    """An absolute path, or one under the SSH user's home (``~/...``, resolved on the host)."""
    path = str(path)
    if path.startswith("~/") and _plain(path):
        return "~/" + posixpath.normpath(path[2:]).lstrip("/")
    return _absolute(path, what + " (absolute, or ~/...)")



# --- commands: every value quoted -----------------------------------------------------------

def version_command(host: SshHost) -> str:
    """The interpreter's version, before anything else runs there: ``-I``, and ``-c`` code that
    imports nothing, so neither the login folder nor PYTHON* variables matter yet."""
    return shlex.join([host.python, "-I", "-c", "import sys; print(list(sys.version_info[:2]))"])


def isolation_flag(python_version) -> str:
    """How a role's interpreter keeps its working folder (the run folder) off ``sys.path``, where
    ``python -m`` puts it first: ``-P`` from Python 3.11; before, ``-I``, which also ignores
    PYTHON* variables (mxbench_env's too; PYTHONUNBUFFERED becomes -u) and the user's site-packages
    (so there the training env must be a venv or a system install, not ``pip install --user``)."""
    return "-P" if tuple(python_version) >= (3, 11) else "-I"


def role_command(host: SshHost, role: Role, remote_run_dir: str, isolation: str = "-P") -> str:
    """The one shell line that runs ``role`` under the supervisor, in the run's folder; the
    supervisor and the role's own interpreter both run with ``isolation`` (see isolation_flag)."""
    variables = {**host.env, **role.env}  # the plan's DMLC_* and thread counts win
    bad = [k for k in variables if not _ENV_NAME.match(k)]
    if bad:
        raise MxbenchError(f"role {role.name}: environment names {bad} cannot be passed to a remote shell")
    env = [f"{k}={v}" for k, v in sorted(variables.items())]
    argv = list(role.argv)
    if argv[:1] == [host.python]:  # the plan's roles: python -m mxbench_train train|serve
        # -I drops PYTHONUNBUFFERED too: the streamed log needs it, as -u
        argv[1:1] = [isolation, "-u"] if isolation == "-I" and variables.get("PYTHONUNBUFFERED") else [isolation]
    supervise = [host.python, isolation, "-m", "mxbench_train", "supervise", "--role", role.name,
                 "--pid-file", posixpath.join(remote_run_dir, "pids", f"{role.name}.json"),
                 "--heartbeat-timeout", f"{HEARTBEAT_TIMEOUT_S:g}", "--", *argv]
    return f"cd {shlex.quote(remote_run_dir)} && exec env {shlex.join([*env, *supervise])}"


# set-up commands run isolated like the roles (isolation_flag): the login folder they start in
# must not shadow mxbench_train

def setup_command(host: SshHost, run_folder: RunFolder, isolation: str = "-P", build: Optional[RunBuild] = None) -> str:
    """The work folder made and checked, and a fresh folder for this host's part of the run in it
    (mxbench_train.host_workdir): one JSON line, {workdir, run_dir, python}; with ``build``, also
    its venv there, found (``build``: host_build's answer), in the same command."""
    return shlex.join([host.python, isolation, "-m", "mxbench_train.host_workdir", "--workdir", host.workdir,
                       "--dag-run", run_folder.path.parent.name, "--run", run_folder.path.name, "--host", host.conn_id,
                       *(["--build-json", build_json(build)] if build else [])])


def build_json(build: RunBuild) -> str:
    """The build as host_build takes it (--spec-json, --build-json)."""
    return json.dumps({"package": build.package, "version": build.version, "spec": list(build.spec)})


def probe_command(host: SshHost, address: Optional[str] = None, isolation: str = "-P") -> str:
    """What the host offers; with ``address``, also a free port there (binding it proves the host
    owns the address its roles will bind)."""
    return shlex.join([host.python, isolation, "-m", "mxbench_train", "probe",
                       *(["--address", address] if address else [])])


def quiet_command(host: SshHost, seconds: float, isolation: str = "-P") -> str:
    """How busy the host is over ``seconds`` (``mxbench_train.quiet_probe``), as one JSON line."""
    return shlex.join([host.python, isolation, "-m", "mxbench_train", "quiet-probe", "--seconds", f"{seconds:g}"])


def reap_command(host: SshHost, remote_run_dir: str, isolation: str = "-P") -> str:
    return shlex.join([host.python, isolation, "-m", "mxbench_train", "reap", "--pids-dir",
                       posixpath.join(remote_run_dir, "pids")])


def remove_command(remote_run_dir: str) -> str:
    """This host's folder of the run, then the run's folder and its DAG run's, each if left empty
    (other hosts' may still be there where homes are shared)."""
    run = posixpath.dirname(remote_run_dir)
    return (f"rm -rf -- {shlex.quote(remote_run_dir)} && "
            f"{{ rmdir -- {shlex.quote(run)} {shlex.quote(posixpath.dirname(run))} 2>/dev/null || true; }}")


def remote_data_dir(host: SshHost, data_dir: Path) -> str:
    return host.data_dir or posixpath.join(host.workdir, "data", Path(data_dir).name)


def build_command(host: SshHost, build: RunBuild, workdir: str, isolation: str = "-P",
                  pip_timeout_s: float = 1800.0, check_only: bool = False) -> str:
    """The build's venv in the host's work folder, made there on first use, checked after
    (``mxbench_train.host_build``): one JSON line, {python, made, seconds, mxnet_version, venv}.
    The connection's mxbench_env applies (PIP_INDEX_URL, a proxy)."""
    argv = [host.python, isolation, "-m", "mxbench_train.host_build", "--workdir", workdir,
            "--spec-json", build_json(build), "--pip-timeout", f"{pip_timeout_s:g}",
            *(["--check-only"] if check_only else [])]
    if host.env:
        argv = ["env", *[f"{k}={v}" for k, v in sorted(host.env.items())], *argv]
    return shlex.join(argv)


def command_error(code: int, err: str, host: SshHost, isolation: Optional[str] = None) -> str:
    """The one line that says why a command on a host failed."""
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    mine = [line for line in lines if line.startswith("error:")]  # mxbench_train's own one-line errors
    if mine:
        return mine[-1][len("error: "):]
    if code == 127 or any(re.search(r"No module named '?mxbench_train\b", line) for line in lines):
        hint = (" (its Python is older than 3.11, so mxbench runs it with -I, which ignores the user's "
                "site-packages: the training env must be a venv or a system install, not pip install --user)"
                if isolation == "-I" else "")
        return (f"the training interpreter {host.python!r} there cannot run mxbench_train (the connection's "
                f"extra mxbench_python, or its mxbench_builds entry, must name one that has it){hint}: "
                f"{lines[-1] if lines else 'not found'}")
    return lines[-1] if lines else f"exit status {code}"


def sha256_command(host: SshHost, remote_dir: str) -> str:
    """Checksums of the data files in a folder on the host, as one JSON line (its own python)."""
    script = ("import hashlib, json, os, sys\n"
              "def sha(p):\n"
              "    h = hashlib.sha256()\n"
              "    with open(p, 'rb') as f:\n"
              "        for b in iter(lambda: f.read(1 << 20), b''): h.update(b)\n"
              "    return h.hexdigest()\n"
              "print(json.dumps({n: sha(os.path.join(sys.argv[1], n)) for n in sys.argv[2:]}))\n")
    return shlex.join([host.python, "-I", "-c", script, remote_dir, *DATA_FILES])


NAME_MAX_BYTES = 255  # the longest file name Linux file systems take (NAME_MAX)


def output_name_ok(name) -> bool:
    """A name a host lists may become a file in the run folder only as a plain name of its own:
    no folder part, not . or .., no NUL or control character, not a local record's name (a
    launcher's step times included), no longer than a file system takes."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and name.isprintable()
            and name not in LOCAL_ONLY and len(os.fsencode(name)) <= NAME_MAX_BYTES)


def peer_silent(peer: tuple) -> Optional[str]:
    """Why ``peer`` (address, port) does not answer a new connection now, in words; None when it does
    (a refusal is an answer: the host's link is up)."""
    try:
        socket.create_connection(peer[:2], timeout=LINK_CHECK_S).close()
    except ConnectionRefusedError:
        return None
    except OSError as down:
        return (f"{peer[0]}:{peer[1]} does not answer now ({down or type(down).__name__}): the link to the "
                f"host is down or throttled to a trickle (a link silent for {LINK_SILENCE_S:g} s ends the "
                "connection)")
    return None


def link_lost(exc: Optional[BaseException]) -> str:
    """Why a connection ended, in words, where ``peer_silent`` found its host answering. Paramiko hears
    a link silenced past LINK_SILENCE_S only as an end of file, so the callers try a fresh connection
    first: that tells a link that is down from a host that hung up."""
    if exc is None:
        return ""
    return f"the connection ended ({type(exc).__name__}{': ' if str(exc) else ''}{exc})"
