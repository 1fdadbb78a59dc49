"""Run one role on a remote host so that it never outlives the SSH channel that started it.

The SSH launcher runs ``python -m mxbench_train supervise`` as the channel's
command (no pty). The supervisor starts the real role in a new session (its own
process group) with the channel's stdout and stderr, and watches its own stdin:
EOF there means the launcher closed the channel or died (sshd closes the pipes
then), and the whole group is stopped. A supervisor killed outright takes the
role with it (PR_SET_PDEATHSIG); what the role started itself is left to
``reap``, which kills the group recorded in the pid file.

EOF needs a connection that ends cleanly. One that dies silently (a network
partition, a suspended host, a launcher machine gone without a FIN) is never
noticed by a stock sshd (``ClientAliveInterval 0``): the session and its pipes
stay open and the role runs on. ``heartbeat_timeout`` (``--heartbeat-timeout``)
covers that: the launcher writes a byte to the channel every few seconds, and
when nothing at all has been read from stdin for that many seconds the group is
stopped exactly as on EOF. Any byte counts; 0, the default, turns it off.

The role runs in a cgroup of its own where the host allows it (``cgroup.RoleCgroup``), removed
when the role ended, whatever its end.

Linux only, stdlib only.
"""
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from . import plan_runner
from .cgroup import RoleCgroup
from .localhost import start_ticks

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# the wrapper itself failed (coreutils' env/timeout convention); 127 is for a command that cannot start
EXIT_SUPERVISOR_FAILED = 125
EXIT_CANNOT_START = 127


def supervise(role: str, pid_file, argv: Sequence[str], heartbeat_timeout: float = 0.0) -> int:
    """Run ``argv`` until it exits or the channel closes; the exit status to report (shell convention).

    ``heartbeat_timeout`` > 0: also stop the role once stdin has been silent that many seconds
    (counted from the role's start, then from the last byte read).
    """
    stop_signals: List[int] = []
    for sig in STOP_SIGNALS:  # before the role starts, so that no stop request is lost
        signal.signal(sig, lambda signum, _frame: stop_signals.append(signum))
    pid_file = Path(pid_file)
    try:
        pid_file.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _say(role, f"cannot write {pid_file}: {exc.strerror or exc}")
        return EXIT_SUPERVISOR_FAILED
    cgroup = RoleCgroup.make(role)
    try:
        return _supervise(role, pid_file, argv, heartbeat_timeout, stop_signals, cgroup)
    finally:
        cgroup.remove()


def _supervise(role, pid_file, argv, heartbeat_timeout, stop_signals, cgroup) -> int:
    try:
        # from the main thread: PR_SET_PDEATHSIG fires when the forking *thread* ends
        child = subprocess.Popen(cgroup.argv(argv), stdin=subprocess.DEVNULL, start_new_session=True,
                                 env={**os.environ, **cgroup.env()},
                                 preexec_fn=plan_runner.entering(cgroup, plan_runner.die_with(os.getpid())))
    except OSError as exc:
        _say(role, f"cannot start {argv[0]}: {exc.strerror or exc}")
        return EXIT_CANNOT_START
    try:
        _write_pid_file(pid_file, role, child.pid)
    except OSError as exc:  # a role nobody could reap after a launcher crash must not run
        _say(role, f"cannot write {pid_file}: {exc.strerror or exc}; stopping the role")
        _finish(child)
        return EXIT_SUPERVISOR_FAILED
    reason = _watch(child.pid, stop_signals, heartbeat_timeout)
    if reason:
        _say(role, f"{reason}, stopping the role")
        plan_runner.signal_group(child.pid, signal.SIGTERM)
        end = time.monotonic() + plan_runner.KILL_GRACE_S
        while not _exited(child.pid) and time.monotonic() < end:
            time.sleep(plan_runner.POLL_S)
    return _finish(child)


def reap_dir(pids_dir) -> List[Tuple[str, int]]:
    """``plan_runner.reap`` every ``pids_dir/*.json``; [(role, pid)] killed. A missing folder: []."""
    killed: List[Tuple[str, int]] = []
    for path in sorted(Path(pids_dir).glob("*.json")):
        killed.extend(plan_runner.reap(path))
    return killed


def _watch(pid: int, stop_signals: List[int], heartbeat_timeout: float = 0.0) -> Optional[str]:
    """Wait for the role to exit (None) or for a reason to stop it: stdin's EOF or error, a signal,
    or (``heartbeat_timeout`` > 0) that many seconds without a byte on stdin."""
    poller = select.poll()
    poller.register(0, select.POLLIN)  # POLLHUP, POLLERR and POLLNVAL are reported regardless
    last_heard = time.monotonic()
    while not _exited(pid):
        if stop_signals:
            return f"got {signal.Signals(stop_signals[0]).name}"
        if heartbeat_timeout > 0 and time.monotonic() - last_heard >= heartbeat_timeout:
            return f"no heartbeat from the launcher for {_seconds(heartbeat_timeout)} s"
        # a timeout, not a blocking read: the handlers above only set a flag, and the role may exit
        if poller.poll(plan_runner.POLL_S * 1000):
            try:
                if not os.read(0, 65536):  # the data itself means nothing
                    return "channel closed"
            except BlockingIOError:  # stdin may come non-blocking from sshd: nothing to read yet
                continue
            except OSError as exc:
                return f"channel read failed ({exc.strerror or exc})"
            last_heard = time.monotonic()  # any byte is a heartbeat
    return None


def _seconds(value: float) -> str:
    """``30`` for 30.0, ``2.5`` for 2.5."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _exited(pid: int) -> bool:
    """Whether the role has exited, without reaping it.

    Left unreaped, its pid cannot go to another process, so the SIGKILL to its
    process group in ``_finish`` cannot hit a stranger's group.
    """
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _finish(child: subprocess.Popen) -> int:
    """SIGKILL the role's group (the role, or what it left behind), reap the role; its exit status."""
    plan_runner.signal_group(child.pid, signal.SIGKILL)
    code = child.wait()
    return 128 - code if code < 0 else code


def _write_pid_file(path: Path, role: str, pid: int):
    """``{role: {"pid": pid, "start": clock ticks}}`` atomically: what ``plan_runner.reap`` reads."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({role: {"pid": pid, "start": start_ticks(pid)}}))
    os.replace(tmp, path)


def _say(role: str, message: str):
    """One line on stderr; the channel may be gone already, so a failed write is ignored."""
    try:
        os.write(2, f"mxbench supervise: {role}: {message}\n".encode(errors="replace"))
    except OSError:  # BrokenPipeError included (Python ignores SIGPIPE)
        pass
