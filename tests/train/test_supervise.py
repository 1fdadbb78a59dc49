"""The remote role supervisor: a role never outlives the SSH channel (the supervisor's stdin).

Real processes throughout: the supervisor runs as ``python -m mxbench_train supervise`` with a
pipe for stdin, as paramiko's exec_command gives it one, and the test plays the launcher.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from mxbench_train.localhost import group_members, is_running, start_ticks
from mxbench_train.plan_runner import KILL_GRACE_S
from support.waiting import wait_for

# sleepers never hold the supervisor's stdout: reading it to EOF must not wait for them
QUIET = ">/dev/null 2>&1"
# a role with a grandchild in its process group, both sleeping
SH_WITH_GRANDCHILD = ["sh", "-c", f"sleep 300 {QUIET} & echo ready; exec sleep 300 {QUIET}"]



def read_line(stream, timeout=10.0):
    """One line from a pipe, or "" when none comes in time (never blocks past the deadline)."""
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline() if ready else ""


@pytest.fixture
def supervisor(tmp_path):
    """Start supervisors the way the SSH launcher does; whatever they leave is SIGKILLed at teardown."""
    started = []

    def start(*argv, role="worker-0", env=None, options=()):
        pid_file = tmp_path / "pids" / "remote" / f"{role}.json"  # the folders do not exist yet
        proc = subprocess.Popen(
            [sys.executable, "-m", "mxbench_train", "supervise", "--role", role, "--pid-file", str(pid_file),
             *options, "--", *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
            env=env)
        started.append((proc, pid_file))
        return proc, pid_file

    yield start
    for proc, pid_file in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        try:
            pgid = next(iter(json.loads(pid_file.read_text()).values()))["pid"]
        except (OSError, ValueError):
            pgid = None
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except BrokenPipeError:
                pass


def role_pid(pid_file, role="worker-0", timeout=10.0):
    """The role's pid from the pid file, once the supervisor has written it."""
    assert wait_for(pid_file.exists, timeout), f"no pid file {pid_file}"
    return json.loads(pid_file.read_text())[role]["pid"]


def finish(proc, timeout=10.0):
    """Wait for the supervisor with its stdin still open (closing it would stop the role); (rc, out, err)."""
    rc = proc.wait(timeout=timeout)
    return rc, proc.stdout.read(), proc.stderr.read()


def run_reap(pids_dir):
    done = subprocess.run([sys.executable, "-m", "mxbench_train", "reap", "--pids-dir", str(pids_dir)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# --- the role ends by itself -------------------------------------------------------------------


def test_exit_code_and_output_pass_through(supervisor):
    proc, _ = supervisor(sys.executable, "-c", "import sys; print('role says hi'); sys.exit(3)")
    rc, out, err = finish(proc)
    assert rc == 3
    assert out == "role says hi\n"  # the role's own output, and nothing from the supervisor
    assert err == ""


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_role_killed_by_signal_exits_128_plus_n(supervisor, sig):
    proc, _ = supervisor(sys.executable, "-c",
                         "import os, resource; resource.setrlimit(resource.RLIMIT_CORE, (0, 0)); "
                         f"os.kill(os.getpid(), {int(sig)})")
    rc, _, err = finish(proc)
    assert rc == 128 + sig, err


def test_role_exit_kills_what_it_left_in_its_group(supervisor):
    proc, pid_file = supervisor("sh", "-c", f"sleep 300 {QUIET} & echo $!")
    grandchild = int(read_line(proc.stdout))
    rc, _, err = finish(proc)
    assert rc == 0, err
    assert wait_for(lambda: not is_running(grandchild), 5), "the role's leftover outlived the supervisor"
    assert group_members(role_pid(pid_file)) == []


def test_environment_and_argv_pass_as_is_without_a_shell(supervisor, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["MXBENCH_PROBE"] = "a b;c"
    hostile = ["$(touch pwned)", "; touch pwned", "`touch pwned`", "a b", "--role", "-h"]
    proc, _ = supervisor(sys.executable, "-c",
                         "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('MXBENCH_PROBE'), "
                         "os.environ.get('OMP_NUM_THREADS')]))", *hostile, env=env)
    rc, out, err = finish(proc)
    assert rc == 0, err
    assert json.loads(out) == [hostile, "a b;c", None]  # main()'s OMP default is not added to the role's
    assert not (tmp_path / "pwned").exists()


def test_program_that_cannot_start_exits_127(supervisor, tmp_path):
    proc, pid_file = supervisor("no-such-program-mxbench", "arg")
    rc, out, err = finish(proc)
    assert rc == 127
    assert err == "mxbench supervise: worker-0: cannot start no-such-program-mxbench: No such file or directory\n"
    assert out == ""
    assert not pid_file.exists()

    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o644)
    proc, _ = supervisor(str(script))
    rc, out, err = finish(proc)
    assert rc == 127
    assert f"cannot start {script}: Permission denied" in err
    assert out == ""


# --- the channel closes, or the supervisor is told to stop ---------------------------------------


def test_channel_eof_kills_role_and_grandchild(supervisor):
    proc, pid_file = supervisor(*SH_WITH_GRANDCHILD)
    assert read_line(proc.stdout) == "ready\n"
    pid = role_pid(pid_file)  # the role may print before the supervisor has written the file
    record = json.loads(pid_file.read_text())
    assert is_running(pid) and record == {"worker-0": {"pid": pid, "start": start_ticks(pid)}}
    assert wait_for(lambda: len(group_members(pid)) >= 2), "the grandchild is not in the role's group"
    members = group_members(pid)

    began = time.monotonic()
    proc.stdin.close()  # what the launcher does; sshd does the same when the launcher dies
    rc, _, err = finish(proc, timeout=KILL_GRACE_S + 5)
    assert time.monotonic() - began < KILL_GRACE_S, "SIGTERM should have been enough, not the SIGKILL"
    assert rc == 128 + signal.SIGTERM
    assert err == "mxbench supervise: worker-0: channel closed, stopping the role\n"
    assert wait_for(lambda: not any(is_running(p) for p in members), 5)


def test_role_ignoring_sigterm_is_killed_after_the_grace(supervisor):
    # an ignored signal stays ignored across exec: sleep ignores SIGTERM too
    proc, pid_file = supervisor("sh", "-c", f"trap '' TERM; echo ready; exec sleep 300 {QUIET}")
    assert read_line(proc.stdout) == "ready\n"
    pid = role_pid(pid_file)
    began = time.monotonic()
    proc.stdin.close()
    rc, _, err = finish(proc, timeout=KILL_GRACE_S + 5)
    elapsed = time.monotonic() - began
    assert rc == 128 + signal.SIGKILL, err
    assert KILL_GRACE_S - 0.5 <= elapsed < KILL_GRACE_S + 3
    assert group_members(pid) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_stop_signal_to_supervisor_stops_role(supervisor, sig):
    proc, pid_file = supervisor(*SH_WITH_GRANDCHILD)
    assert read_line(proc.stdout) == "ready\n"
    pid = role_pid(pid_file)
    assert wait_for(lambda: len(group_members(pid)) >= 2)
    proc.send_signal(sig)
    rc, _, err = finish(proc, timeout=KILL_GRACE_S + 5)
    assert rc == 128 + signal.SIGTERM  # the role got SIGTERM from the supervisor, whatever it got itself
    assert err == f"mxbench supervise: worker-0: got {sig.name}, stopping the role\n"
    assert wait_for(lambda: group_members(pid) == [], 5)


def test_supervisor_sigkilled_role_dies_and_reap_gets_the_rest(supervisor, tmp_path):
    proc, pid_file = supervisor(*SH_WITH_GRANDCHILD)
    assert read_line(proc.stdout) == "ready\n"
    pid = role_pid(pid_file)
    assert wait_for(lambda: len(group_members(pid)) >= 2)
    proc.kill()
    proc.wait(timeout=5)
    assert wait_for(lambda: not is_running(pid), 5), "the role outlived its SIGKILLed supervisor"
    leftovers = group_members(pid)
    assert leftovers, "nothing left for reap: PR_SET_PDEATHSIG reaches the role only"

    assert run_reap(pid_file.parent) == [["worker-0", pid]]
    assert wait_for(lambda: group_members(pid) == [], 5)
    assert not any(is_running(p) for p in leftovers)


# --- the channel goes silent: no EOF ever comes ---------------------------------------------------


def test_heartbeats_keep_the_role_and_silence_stops_it(supervisor):
    timeout = 1.5
    proc, pid_file = supervisor(*SH_WITH_GRANDCHILD, options=("--heartbeat-timeout", f"{timeout}"))
    assert read_line(proc.stdout) == "ready\n"
    pid = role_pid(pid_file)
    assert wait_for(lambda: len(group_members(pid)) >= 2)
    members = group_members(pid)

    end = time.monotonic() + 3.0  # twice the timeout: only the heartbeats keep it going
    while time.monotonic() < end:
        proc.stdin.write("x")  # the byte means nothing but "still here"
        proc.stdin.flush()
        time.sleep(0.3)
    assert proc.poll() is None and is_running(pid), "the role was stopped despite the heartbeats"
    proc.stdin.write("\n")  # the last heartbeat; stdin stays open, as over a dead connection
    proc.stdin.flush()
    silent_since = time.monotonic()

    rc, _, err = finish(proc, timeout=timeout + KILL_GRACE_S + 5)
    elapsed = time.monotonic() - silent_since
    assert timeout - 0.2 <= elapsed < timeout + KILL_GRACE_S, elapsed
    assert rc == 128 + signal.SIGTERM
    assert err == "mxbench supervise: worker-0: no heartbeat from the launcher for 1.5 s, stopping the role\n"
    assert wait_for(lambda: not any(is_running(p) for p in members), 5)


def test_without_heartbeat_timeout_silence_is_not_a_reason_to_stop(supervisor):
    proc, pid_file = supervisor(*SH_WITH_GRANDCHILD)  # the default: 0, off
    assert read_line(proc.stdout) == "ready\n"
    pid = role_pid(pid_file)
    time.sleep(3.0)
    assert proc.poll() is None and is_running(pid), "stopped with no heartbeat asked for"
    proc.stdin.close()
    rc, _, err = finish(proc, timeout=KILL_GRACE_S + 5)
    assert rc == 128 + signal.SIGTERM
    assert err == "mxbench supervise: worker-0: channel closed, stopping the role\n"


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_heartbeat_timeout_must_be_finite_seconds(supervisor, value):
    proc, pid_file = supervisor("true", options=("--heartbeat-timeout", value))
    rc, out, err = finish(proc)
    assert rc == 2
    assert "--heartbeat-timeout" in err and out == ""
    assert not pid_file.exists()


# --- reap ----------------------------------------------------------------------------------------


def test_reap_missing_or_empty_dir_prints_empty_list(tmp_path):
    assert run_reap(tmp_path / "missing") == []
    (tmp_path / "empty").mkdir()
    assert run_reap(tmp_path / "empty") == []


def test_reap_kills_recorded_process_and_spares_a_reused_pid(tmp_path):
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    live = subprocess.Popen(["sleep", "300"], start_new_session=True)
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (pids_dir / "server-0.json").write_text(
            json.dumps({"server-0": {"pid": live.pid, "start": start_ticks(live.pid)}}))
        # the recorded start time is not this process's: its pid was reused, it must be left alone
        (pids_dir / "server-1.json").write_text(
            json.dumps({"server-1": {"pid": stranger.pid, "start": start_ticks(stranger.pid) - 1}}))
        (pids_dir / "notes.txt").write_text("not a pid file")
        assert run_reap(pids_dir) == [["server-0", live.pid]]
        assert live.wait(timeout=5) == -signal.SIGKILL
        assert stranger.poll() is None
    finally:
        for p in (live, stranger):
            p.kill()
            p.wait()
