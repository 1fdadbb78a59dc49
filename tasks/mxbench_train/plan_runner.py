"""Run a role plan (``role_plan.plan_roles``): one log per role, a deadline, fail fast.

``run_plan`` drives one handle per role: a local process (``LocalProcess``, the default and
``python -m mxbench_train launch``), or what the SSH and Kubernetes launchers start.
Replaces ``mxnet.tools.launch`` (which crashes on Python 3.11, orphans its
scheduler and hangs forever when a worker dies). Every role runs in its own
process group, so killing a role kills whatever it started too; no process
outlives ``run_plan``, whether the job succeeds, fails, times out or the
launcher (the process running ``run_plan``) gets SIGTERM. A launcher killed outright (SIGKILL) takes its
roles with it (PR_SET_PDEATHSIG), and ``reap`` kills what an earlier attempt
left behind all the same.
"""
import ctypes
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from . import run_files
from .cgroup import RoleCgroup
from .errors import MxbenchError
from .localhost import is_running, proc_stat, start_ticks
from .role_plan import Role

POLL_S = 0.05
# after the workers finish, the scheduler and servers get this long to shut down by themselves
SHUTDOWN_GRACE_S = 10.0
KILL_GRACE_S = 3.0
# a scheduler/server that ends badly while workers still run gets this long to be seen as
# shutdown noise: ps-lite's scheduler may abort at exit a moment before the workers are gone
ROLE_EXIT_GRACE_S = SHUTDOWN_GRACE_S
PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


class RoleFailed(MxbenchError):
    """``link_fault``: the host and link whose fault ended the role, where one did (a launcher's handle
    says so in its ``link_fault``), so that the report can say the run was lost to it."""

    def __init__(self, role: Role, status: str, log_path: Path, link_fault: Optional[str] = None):
        self.role, self.status, self.log_path, self.link_fault = role, status, log_path, link_fault
        tail = _tail(log_path)
        super().__init__(
            f"role {role.name} on host {role.host} {status}; log {log_path}"
            + (f"; last line: {tail}" if tail else ""))


class LaunchTimeout(MxbenchError):
    pass


class LaunchInterrupted(MxbenchError):
    pass


@dataclass
class RoleResult:
    name: str
    host: str
    pid: int
    returncode: Optional[int]
    log: str
    start_s: float  # when it started, seconds after the first role did
    wall_s: Optional[float]  # start to exit, as seen by the launcher's poll
    # a scheduler/server that ended abnormally by itself after every worker exited 0: the
    # results stand, but say so (None otherwise, also for a role the teardown killed)
    warning: Optional[str] = None


def describe_exit(returncode: int) -> str:
    """How a role's exit status reads, for every launcher: a negative one (a local process) and
    128 + n (a shell, sshd or a container runtime reporting a signal) name the signal."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    if 128 < returncode < 128 + signal.NSIG:
        try:
            return f"was killed by {signal.Signals(returncode - 128).name} (exit status {returncode})"
        except ValueError:
            pass
    return f"exited with code {returncode}"


class LocalProcess:
    """A role started on this machine, in its own session; the handle ``run_plan`` drives.

    Other starters (the SSH launcher's) offer the same: ``pid``, ``returncode``, ``poll()``,
    ``describe()``, ``terminate()``, ``kill()``, ``wait(timeout)``, ``close()`` and ``record()``.
    The role runs in a cgroup of its own where the host allows it (``cgroup.RoleCgroup``), removed
    on ``close()``.
    """

    def __init__(self, role: Role, log_path: Path, cwd=None, preexec_fn=None):
        self.cgroup = RoleCgroup.make(role.name)
        with open(log_path, "wb") as out:
            try:
                self.popen = subprocess.Popen(
                    self.cgroup.argv(role.argv), env={**os.environ, **role.env, **self.cgroup.env()}, cwd=cwd,
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, preexec_fn=entering(self.cgroup, preexec_fn))
            except OSError as exc:
                self.cgroup.remove()
                raise MxbenchError(f"cannot start role {role.name} on host {role.host}: {exc}") from None
        self.pid = self.popen.pid

    @property
    def returncode(self) -> Optional[int]:
        return self.popen.returncode

    def poll(self) -> Optional[int]:
        return self.popen.poll()

    def describe(self) -> str:
        return describe_exit(self.popen.returncode)

    def terminate(self):
        signal_group(self.pid, signal.SIGTERM)

    def kill(self):
        signal_group(self.pid, signal.SIGKILL)

    def wait(self, timeout: float):
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass

    def close(self):
        # reap the group too: a role's children die with their session leader's group
        signal_group(self.pid, signal.SIGKILL)
        self.cgroup.remove()

    def record(self) -> Optional[dict]:
        return {"pid": self.pid, "start": start_ticks(self.pid)}


def entering(cgroup: RoleCgroup, then=None):
    """preexec_fn: move the child into ``cgroup``, then run ``then``. A move that fails leaves the
    role where it is; it finds out itself (``cgroup.run_cgroup``) and reads the host-wide PSI."""
    def preexec():
        try:
            cgroup.enter()
        except OSError:
            pass
        if then is not None:
            then()

    return preexec


def signal_group(pid, sig):
    """Signal a process group; an empty group is no error."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_plan(plan: Sequence[Role], log_dir, deadline_s: float = 3600.0, cwd=None, start=None) -> List[RoleResult]:
    """Start every role, wait for the workers, and tear everything down.

    Writes ``log_dir/roles/<role>.log`` for each role and ``log_dir/pids.json``
    (``{role: {"pid": pid, "start": start time in clock ticks}}``, for ``reap``).
    Raises RoleFailed (naming role, host, exit status) as soon as a worker
    exits non-zero, or a scheduler/server does while workers still run;
    LaunchTimeout past ``deadline_s``.

    ``start(role, log_path)`` starts one role and returns its handle (see
    LocalProcess); by default roles are local processes. Local roles die with
    the thread that started them (PR_SET_PDEATHSIG), so call it from a thread
    that outlives the job: the main thread, as the pipeline does.
    """
    log_dir = Path(log_dir)
    (log_dir / run_files.ROLES).mkdir(parents=True, exist_ok=True)
    if start is None:
        die_with_launcher = die_with(os.getpid())

        def start(role, log_path):
            return LocalProcess(role, log_path, cwd=cwd, preexec_fn=die_with_launcher)

    procs: Dict[str, object] = {}
    logs: Dict[str, Path] = {}
    started: Dict[str, float] = {}
    ended: Dict[str, float] = {}
    warnings: Dict[str, str] = {}
    records = {}
    restore = _raise_on_sigterm()
    deadline = time.monotonic() + deadline_s  # starting the roles counts too (a pod may wait for a node)
    try:
        for role in plan:  # scheduler first: the plan lists it first
            logs[role.name] = run_files.role_log(log_dir, role.name)
            procs[role.name] = start(role, logs[role.name])
            started[role.name] = time.monotonic()
            record = procs[role.name].record()
            if record:
                records[role.name] = record
                _write_json(log_dir / run_files.PIDS, records)
        _wait(plan, procs, logs, ended, warnings, deadline, deadline_s)
    finally:
        _kill_all(procs.values())
        restore()
    first = min(started.values(), default=0.0)
    return [RoleResult(r.name, r.host, procs[r.name].pid, procs[r.name].returncode, str(logs[r.name]),
                       round(started[r.name] - first, 3),
                       round(ended[r.name] - started[r.name], 3) if r.name in ended else None,
                       warnings.get(r.name))
            for r in plan]


def _wait(plan, procs, logs, ended, warnings, deadline, deadline_s):
    workers = [r for r in plan if r.kind == "worker"]
    workers_done_at = None
    broken, broken_at = None, None  # the first scheduler/server that ended badly while workers ran

    def failed(role):
        status = procs[role.name].describe()  # first: it may find the link fault
        return RoleFailed(role, status, logs[role.name], getattr(procs[role.name], "link_fault", None))

    while True:
        if INTERRUPTED:
            raise interruption()
        now = time.monotonic()
        for role in plan:  # poll every role before judging any, so a worker's exit 0 is not missed
            if procs[role.name].poll() is not None:
                ended.setdefault(role.name, now)
        workers_ok = all(procs[r.name].returncode == 0 for r in workers)
        for role in plan:
            code = procs[role.name].returncode
            if not code or role.name in warnings:
                continue
            if role.kind == "worker":
                raise failed(broken or role)  # a worker failing after a server died: the server is the cause
            if workers_ok:  # ps-lite's scheduler/servers may abort at shutdown: the results stand
                warnings[role.name] = (f"{role.name} on host {role.host} {procs[role.name].describe()}, but every "
                                       f"worker exited 0: results kept; log {logs[role.name]}")
            elif broken is None:
                broken, broken_at = role, now
        if broken and not workers_ok and now - broken_at > ROLE_EXIT_GRACE_S:
            raise failed(broken)
        if workers_ok:
            if all(p.returncode is not None for p in procs.values()):
                return
            workers_done_at = workers_done_at or now
            if now - workers_done_at > SHUTDOWN_GRACE_S:
                return  # workers succeeded; lingering scheduler/servers are killed in run_plan
        if now > deadline:
            running = [r.name for r in plan if procs[r.name].returncode is None]
            raise LaunchTimeout(f"job passed its {deadline_s:.0f} s deadline; killed {', '.join(running)}")
        time.sleep(POLL_S)


def _kill_all(procs):
    """SIGTERM every live role, SIGKILL what is left after the grace, then close every handle."""
    alive = [p for p in procs if p.poll() is None]
    for stop in ("terminate", "kill"):
        for p in alive:
            getattr(p, stop)()
        end = time.monotonic() + KILL_GRACE_S
        while alive and time.monotonic() < end:
            alive = [p for p in alive if p.poll() is None]
            time.sleep(0.05)
        if not alive:
            break
    for p in procs:
        p.wait(timeout=KILL_GRACE_S)
        p.close()


def reap(pids_path) -> List[Tuple[str, int]]:
    """SIGKILL what an earlier attempt's ``pids.json`` lists and is still there; [(role, pid)] hit.

    A pid counts only with the start time recorded beside it, so a reused pid is
    left alone. A role's group is killed too, also when the role itself is gone:
    its pid cannot be reused while its group has members (e.g. the worker's
    nvidia-smi sampler, which PR_SET_PDEATHSIG does not reach).
    """
    try:
        records = json.loads(Path(pids_path).read_text())
    except (OSError, ValueError):
        return []  # no earlier attempt got as far as starting a role
    killed = []
    for name, record in records.items():
        if not isinstance(record, dict) or not record.get("start"):
            continue  # no start time to tell the role from a process that got its pid since
        pid = record["pid"]
        stat = proc_stat(pid)
        if stat is not None and stat.start_ticks != record["start"]:
            continue  # the pid is someone else's now, and so is any group of that number
        hit = _signal(os.killpg, pid)
        if stat is not None:
            hit = _signal(os.kill, pid) or hit
        if hit:
            killed.append((name, pid))
    end = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < end and any(is_running(pid) for _, pid in killed):
        time.sleep(0.05)
    return killed


def _signal(send, pid) -> bool:
    try:
        send(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def die_with(launcher_pid):
    """preexec_fn: SIGKILL the role when the launcher dies, even by SIGKILL.

    The kernel sends it when the *thread* that forked the role exits, not the
    process: hence run_plan's caller thread must outlive the job (it is the main
    thread in the pipeline and in ``launch``).
    """
    sigkill = ctypes.c_ulong(signal.SIGKILL)

    def preexec():
        # a failed prctl or a launcher already gone: this process could outlive it, so never start
        if _libc.prctl(PR_SET_PDEATHSIG, sigkill) != 0 or os.getppid() != launcher_pid:
            os._exit(1)

    return preexec


def _raise_on_sigterm():
    """Turn SIGTERM into an exception so that run_plan's cleanup runs; main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, _frame):
        if not INTERRUPTED:  # a second SIGTERM must not cut the cleanup short
            INTERRUPTED.append(signum)
            raise interruption()

    def restore():
        signal.signal(signal.SIGTERM, previous)
        INTERRUPTED.clear()

    INTERRUPTED.clear()
    previous = signal.signal(signal.SIGTERM, handler)
    return restore


# the SIGTERM that run_plan's handler turned into LaunchInterrupted: a launcher's handle may catch
# the exception by accident (a broad except around an API call), so _wait also raises it from here
INTERRUPTED: List[int] = []


def interruption() -> LaunchInterrupted:
    return LaunchInterrupted(f"launcher got {signal.Signals(INTERRUPTED[0]).name}; stopped all roles")


def _tail(path: Path, limit: int = 300) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][-limit:] if lines else ""


def _write_json(path: Path, data):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
