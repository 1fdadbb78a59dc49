"""Run a role plan as local processes: one log per role, a deadline, fail fast.

Replaces ``mxnet.tools.launch`` (which crashes on Python 3.11, orphans its
scheduler and hangs forever when a worker dies). Every role runs in its own
process group, so killing a role kills whatever it started too; no process
outlives ``run_plan``, whether the job succeeds, fails, times out or the
launcher itself gets SIGTERM.
"""
import json
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .errors import MxbenchError
from .roles import Role

POLL_S = 0.05
# after the workers finish, the scheduler and servers get this long to shut down by themselves
SHUTDOWN_GRACE_S = 10.0
KILL_GRACE_S = 3.0


class RoleFailed(MxbenchError):
    def __init__(self, role: Role, status: str, log_path: Path):
        self.role, self.status, self.log_path = role, status, log_path
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


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, for the scheduler of a local job."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def run_plan(plan: Sequence[Role], log_dir, deadline_s: float = 3600.0, cwd=None) -> List[RoleResult]:
    """Start every role, wait for the workers, and tear everything down.

    Writes ``log_dir/roles/<role>.log`` for each role and ``log_dir/pids.json``.
    Raises RoleFailed (naming role, host, exit status) as soon as any role
    exits non-zero, LaunchTimeout past ``deadline_s``.
    """
    log_dir = Path(log_dir)
    (log_dir / "roles").mkdir(parents=True, exist_ok=True)
    procs: Dict[str, subprocess.Popen] = {}
    logs: Dict[str, Path] = {}
    started: Dict[str, float] = {}
    ended: Dict[str, float] = {}
    restore = _raise_on_sigterm()
    try:
        for role in plan:  # scheduler first: the plan lists it first
            logs[role.name] = log_dir / "roles" / f"{role.name}.log"
            with open(logs[role.name], "wb") as out:
                try:
                    procs[role.name] = subprocess.Popen(
                        list(role.argv), env={**os.environ, **role.env}, cwd=cwd,
                        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        start_new_session=True)
                except OSError as exc:
                    raise MxbenchError(f"cannot start role {role.name} on host {role.host}: {exc}") from None
            started[role.name] = time.monotonic()
            _write_json(log_dir / "pids.json", {name: p.pid for name, p in procs.items()})
        _wait(plan, procs, logs, ended, time.monotonic() + deadline_s, deadline_s)
    finally:
        _kill_all(procs.values())
        restore()
    first = min(started.values(), default=0.0)
    return [RoleResult(r.name, r.host, procs[r.name].pid, procs[r.name].returncode, str(logs[r.name]),
                       round(started[r.name] - first, 3),
                       round(ended[r.name] - started[r.name], 3) if r.name in ended else None)
            for r in plan]


def _wait(plan, procs, logs, ended, deadline, deadline_s):
    workers = [r for r in plan if r.kind == "worker"]
    workers_done_at = None
    while True:
        for role in plan:
            code = procs[role.name].poll()
            if code is not None:
                ended.setdefault(role.name, time.monotonic())
            if code is not None and code != 0:
                raise RoleFailed(role, describe_exit(code), logs[role.name])
        if all(procs[r.name].returncode == 0 for r in workers):
            if all(p.returncode is not None for p in procs.values()):
                return
            workers_done_at = workers_done_at or time.monotonic()
            if time.monotonic() - workers_done_at > SHUTDOWN_GRACE_S:
                return  # workers succeeded; lingering scheduler/servers are killed in run_plan
        if time.monotonic() > deadline:
            running = [r.name for r in plan if procs[r.name].returncode is None]
            raise LaunchTimeout(f"job passed its {deadline_s:.0f} s deadline; killed {', '.join(running)}")
        time.sleep(POLL_S)


def _kill_all(procs):
    alive = [p for p in procs if p.poll() is None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + KILL_GRACE_S
        while alive and time.monotonic() < end:
            alive = [p for p in alive if p.poll() is None]
            time.sleep(0.05)
        if not alive:
            break
    for p in procs:
        try:
            p.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        # reap the group too: a role's children die with their session leader's group
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _raise_on_sigterm():
    """Turn SIGTERM into an exception so that run_plan's cleanup runs; main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    interrupted = []

    def handler(signum, _frame):
        if not interrupted:  # a second SIGTERM must not cut the cleanup short
            interrupted.append(signum)
            raise LaunchInterrupted(f"launcher got {signal.Signals(signum).name}; stopped all roles")

    previous = signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _tail(path: Path, limit: int = 300) -> str:
    try:
        lines = [l for l in path.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    return lines[-1][-limit:] if lines else ""


def _write_json(path: Path, data):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
