"""A cgroup of its own for each role, and how long the run's own tasks waited for a CPU (stdlib only).

The best signal for "my run waited because of someone else" is the CPU pressure (PSI ``some``) of
the run's own cgroup v2: the share of time at least one of its tasks was runnable and waiting for a
CPU. Host-wide PSI counts every task on the host (the Airflow worker's own, a neighbour's pod), and
a pod cannot see its node's processes; its own cgroup it can always read.

- **local and ssh**: the role's starter (``plan_runner.LocalProcess``, ``supervise``) makes
  ``RoleCgroup``: a child cgroup under the cgroup v2 mount (``v2_mount``: ``/sys/fs/cgroup`` on a
  pure v2 host, ``/sys/fs/cgroup/unified`` on a hybrid one), named uniquely per role start, moves
  the role into it before it execs, and removes it after the role ended (killing what is left in
  it). Where no child cgroup can be made but ``systemd-run`` works (a host where systemd owns the
  tree), the role starts through ``systemd-run --scope`` in a scope of its own instead (``SCOPE_ENV``:
  its unit; systemd removes it when the role ended). It tells the role where it is (``CGROUP_ENV``,
  ``SCOPE_ENV``), or why it is not (``UNAVAILABLE_ENV``: no v2 mount, not writable, no working
  systemd-run): the host-wide PSI stands in then, last, and the record says so.
- **pods**: the container's own cgroup, as ``/proc/self/cgroup`` names it under the v2 mount (on a
  cgroup v2 node, the pod's own; the Kubernetes stand-in's kubelet makes one per pod, as a real one).

``run_cgroup`` says which cgroup a role reads and in words where the signal comes from;
``pressure_total_us`` reads a ``cpu.pressure`` file. Every reader takes its paths as arguments, so
a planted tree in a temporary folder tests them.
"""
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

MOUNTS = Path("/proc/self/mounts")
SELF_CGROUP = Path("/proc/self/cgroup")
ROOT_ENV = "MXBENCH_CGROUP_ROOT"  # the deployer's (or a test's) cgroup v2 mount, instead of the one found
CGROUP_ENV = "MXBENCH_CGROUP"  # set by the starter: the role's own cgroup, relative to the mount
UNAVAILABLE_ENV = "MXBENCH_CGROUP_UNAVAILABLE"  # set by the starter: why the role has no cgroup of its own
SCOPE_ENV = "MXBENCH_CGROUP_SCOPE"  # set by the starter: the systemd scope unit the role was started in
SYSTEMD_RUN = "systemd-run"
PROBE_TIMEOUT_S = 10.0
PREFIX = "mxbench-"
REMOVE_WAIT_S = 2.0  # exiting tasks leave the cgroup a moment after they are reaped


def v2_mount(mounts: Optional[Path] = None, environ: Optional[Mapping[str, str]] = None) -> Optional[Path]:
    """Where the cgroup v2 hierarchy is mounted (``ROOT_ENV`` if set), None when it is not."""
    environ = os.environ if environ is None else environ
    if environ.get(ROOT_ENV):
        return Path(environ[ROOT_ENV])
    try:
        for line in (mounts or MOUNTS).read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[2] == "cgroup2":
                return Path(fields[1].replace("\\040", " "))
    except OSError:
        pass
    return None


def own_path(self_cgroup: Optional[Path] = None) -> Optional[str]:
    """This process's cgroup v2 path (``/proc/self/cgroup``'s ``0::`` line), e.g. ``/kubepods/pod1``."""
    try:
        for line in (self_cgroup or SELF_CGROUP).read_text().splitlines():
            if line.startswith("0::"):
                return line[3:].strip() or "/"
    except OSError:
        pass
    return None


def pressure_total_us(folder: Path) -> Optional[int]:
    """A cgroup's cumulative CPU ``some`` stall (its ``cpu.pressure``), microseconds; None unreadable."""
    try:
        for line in (Path(folder) / "cpu.pressure").read_text().splitlines():
            if line.startswith("some "):
                return int(dict(f.split("=", 1) for f in line.split()[1:])["total"])
    except (OSError, ValueError, KeyError):
        pass
    return None


def _under(mount: Path, path: str) -> Path:
    return mount / path.lstrip("/")


def run_cgroup(environ: Mapping[str, str], in_pod: bool, mounts: Optional[Path] = None,
               self_cgroup: Optional[Path] = None) -> Tuple[Optional[Path], str]:
    """The cgroup whose ``cpu.pressure`` is this role's own (None: there is none to read) and where
    the run's pressure comes from, in words (the host-wide PSI and why, where there is none)."""
    if environ.get(UNAVAILABLE_ENV):
        return None, f"host-wide PSI: no cgroup of its own ({environ[UNAVAILABLE_ENV]})"
    expected, scope = environ.get(CGROUP_ENV), environ.get(SCOPE_ENV)
    if not in_pod and not expected and not scope:
        return None, "host-wide PSI: its starter made no cgroup for it"
    mount, path = v2_mount(mounts, environ), own_path(self_cgroup)
    if mount is None or path is None:
        return None, "host-wide PSI: no cgroup v2 here"
    if expected and path.rstrip("/") != expected.rstrip("/"):
        return None, f"host-wide PSI: it is in {path}, not in the cgroup {expected} made for it"
    if scope and not path.rstrip("/").endswith(f"/{scope}.scope"):
        return None, f"host-wide PSI: it is in {path}, not in the systemd scope {scope} started for it"
    folder = _under(mount, path)
    if pressure_total_us(folder) is None:
        return None, f"host-wide PSI: {folder}/cpu.pressure cannot be read"
    if in_pod:
        return folder, "the pod's own cgroup"
    return folder, "the role's own systemd scope (systemd-run)" if scope else "the role's own cgroup"


def _unique(role: str) -> str:
    """A cgroup's (or scope's) name, unique per start: several runs, tests and engineers share a host."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in role)[:40]
    return f"{PREFIX}{safe}-{os.getpid()}-{secrets.token_hex(4)}"


def systemd_run_works() -> bool:
    """Whether ``systemd-run --scope`` can start a command here: it is on PATH and a systemd answers
    it (a container often has the binary but no systemd as init)."""
    found = shutil.which(SYSTEMD_RUN)
    if found is None:
        return False
    try:
        return subprocess.run([found, "--scope", "--quiet", "--collect", "--", "true"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=PROBE_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def sweep(mount: Path):
    """Remove the empty cgroups that starters gone since left (one killed outright cannot clean
    up): named ``mxbench-<role>-<pid>-<token>`` by ``RoleCgroup.make``, pid no longer running. One
    with tasks in it cannot be removed, and stays."""
    try:
        entries = list(mount.glob(f"{PREFIX}*"))
    except OSError:
        return
    for folder in entries:
        parts = folder.name.rsplit("-", 2)
        if len(parts) == 3 and parts[1].isdigit() and not os.path.exists(f"/proc/{parts[1]}"):
            try:
                folder.rmdir()
            except OSError:
                pass


class RoleCgroup:
    """A cgroup of one role's own under the v2 mount, or the reason there is none (``why``).

    ``make`` never raises; ``preexec`` (in the child, before exec) moves the role in; ``argv`` is the
    role's command as started (through ``systemd-run --scope`` where that is the cgroup, ``scope``);
    ``env`` tells the role which it is; ``remove`` kills what is left in it and removes it (call it
    after the role ended, whether it succeeded or not).
    """

    def __init__(self, folder: Optional[Path], mount: Optional[Path], why: Optional[str],
                 scope: Optional[str] = None):
        self.folder, self.mount, self.why, self.scope = folder, mount, why, scope

    @classmethod
    def make(cls, role: str, mounts: Optional[Path] = None,
             environ: Optional[Mapping[str, str]] = None) -> "RoleCgroup":
        made = cls._child(role, mounts, environ)
        if made.folder is None and made.mount is not None and systemd_run_works():
            return cls(None, made.mount, None, scope=_unique(role))
        return made

    @classmethod
    def _child(cls, role: str, mounts: Optional[Path], environ: Optional[Mapping[str, str]]) -> "RoleCgroup":
        mount = v2_mount(mounts, environ)
        if mount is None:
            return cls(None, None, "no cgroup v2 mount")
        sweep(mount)
        folder = mount / _unique(role)
        try:
            folder.mkdir()
        except OSError as exc:
            return cls(None, mount, f"cannot make a cgroup under {mount}: {exc.strerror or exc}")
        if not os.access(folder / "cgroup.procs", os.W_OK):
            cls(folder, mount, None).remove()
            return cls(None, mount, f"cannot move a process into a cgroup under {mount}")
        return cls(folder, mount, None)

    def argv(self, argv) -> list:
        """The role's command as started: in its systemd scope where that is its cgroup."""
        if self.scope is None:
            return list(argv)
        return [SYSTEMD_RUN, "--scope", "--quiet", "--collect", f"--unit={self.scope}", "--", *argv]

    def env(self) -> Dict[str, str]:
        if self.scope is not None:
            return {SCOPE_ENV: self.scope}
        if self.folder is None:
            return {UNAVAILABLE_ENV: self.why or "unknown"}
        return {CGROUP_ENV: "/" + str(self.folder.relative_to(self.mount))}

    def enter(self, pid: int = 0):
        """Move ``pid`` (0: the calling process) into the cgroup; raises OSError when it cannot."""
        if self.folder is not None:
            with open(self.folder / "cgroup.procs", "w") as f:
                f.write(str(pid))

    def remove(self):
        """Kill whatever is still in it and remove it; a cgroup gone already is no error."""
        if self.folder is None:
            return
        deadline = time.monotonic() + REMOVE_WAIT_S
        while True:
            try:
                self.folder.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # busy: tasks left in it, or exiting ones not gone yet
                if time.monotonic() > deadline:
                    return
                self._kill_members()
                time.sleep(0.05)

    def _kill_members(self):
        try:
            (self.folder / "cgroup.kill").write_text("1")  # Linux >= 5.14
            return
        except OSError:
            pass
        try:
            pids = [int(p) for p in (self.folder / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
