"""This machine's processes and ports as ``mxbench_train.localhost`` reads them: real processes throughout."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mxbench_train import localhost
from support.waiting import wait_for

# a child that starts a grandchild in its own process group, prints the grandchild's pid, then sleeps
WITH_GRANDCHILD = ("import subprocess, sys, time; g = subprocess.Popen(['sleep', '300']); "
                   "print(g.pid, flush=True); time.sleep(300)")
# a process that names itself "a) b (c) d" (PR_SET_NAME), as a hostile or odd program may
RENAMED = ("import ctypes, time; ctypes.CDLL(None).prctl(15, b'a) b (c) d'); print('renamed', flush=True); "
           "time.sleep(300)")


@pytest.fixture
def spawn():
    """Start processes that the test owns; every one is killed (with its group) afterwards."""
    started = []

    def start(argv, **kwargs):
        proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


def test_a_running_process_reads_as_its_kernel_says(spawn):
    proc = spawn(["sleep", "300"])
    stat = localhost.proc_stat(proc.pid)
    assert stat is not None and stat.state in "RSD"
    assert stat.ppid == os.getpid()
    assert stat.pgrp == proc.pid  # start_new_session: it leads its own group
    assert stat.start_ticks > 0 and localhost.start_ticks(proc.pid) == stat.start_ticks
    assert localhost.is_running(proc.pid) and localhost.is_running(proc.pid, stat.start_ticks)
    assert not localhost.is_running(proc.pid, stat.start_ticks + 1)  # a later process with its pid


def test_this_process_is_listed_with_its_parent():
    found = dict(localhost.processes())
    assert found[os.getpid()].ppid == os.getppid()
    # the same fields but the CPU time, which goes on between the two reads
    assert found[os.getpid()]._replace(cpu_ticks=0) == localhost.proc_stat(os.getpid())._replace(cpu_ticks=0)


def test_a_later_process_has_later_start_ticks(spawn):
    first = spawn(["sleep", "300"])
    first_ticks = localhost.start_ticks(first.pid)
    time.sleep(3 / os.sysconf("SC_CLK_TCK"))  # start ticks count clock ticks: let a few pass
    later = spawn(["sleep", "300"])
    assert localhost.start_ticks(later.pid) > first_ticks
    assert localhost.is_running(first.pid, first_ticks) and not localhost.is_running(later.pid, first_ticks)


def test_a_zombie_is_not_running(spawn):
    proc = spawn(["true"])
    # not reaped yet: the pid stays a zombie until wait()
    assert wait_for(lambda: localhost.proc_stat(proc.pid).state == "Z", timeout=5)
    assert not localhost.is_running(proc.pid)
    assert proc.pid not in localhost.group_members(proc.pid)
    proc.wait()
    assert localhost.proc_stat(proc.pid) is None and localhost.start_ticks(proc.pid) is None
    assert not localhost.is_running(proc.pid)


def test_descendants_and_group_members_find_a_child_and_its_grandchild(spawn):
    child = spawn([sys.executable, "-c", WITH_GRANDCHILD], stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    assert localhost.proc_stat(grandchild).ppid == child.pid
    assert set(localhost.descendants(child.pid)) == {grandchild}
    assert {child.pid, grandchild} <= set(localhost.descendants(os.getpid()))
    assert sorted(localhost.group_members(child.pid)) == sorted([child.pid, grandchild])
    os.kill(grandchild, signal.SIGKILL)
    assert wait_for(lambda: localhost.group_members(child.pid) == [child.pid], timeout=5)


def test_a_process_name_with_spaces_and_parens_parses(spawn):
    # the name in /proc/<pid>/stat is free text in parentheses: only the last ")" ends it
    proc = spawn([sys.executable, "-c", RENAMED], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "renamed"
    assert Path(f"/proc/{proc.pid}/stat").read_text().startswith(f"{proc.pid} (a) b (c) d) ")
    stat = localhost.proc_stat(proc.pid)
    assert stat is not None and stat.state in "RSD" and stat.ppid == os.getpid() and stat.pgrp == proc.pid
    assert localhost.is_running(proc.pid, localhost.start_ticks(proc.pid))


def test_a_missing_process_reads_as_none():
    assert localhost.proc_stat(2 ** 22 + 1) is None  # above pid_max's ceiling: never a process
    assert not localhost.is_running(2 ** 22 + 1)


def test_a_free_port_can_be_bound():
    port = localhost.free_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))
        s.listen()


def test_identities_are_stable_and_not_empty():
    assert localhost.machine_id() and localhost.machine_id() == localhost.machine_id()
    scope = localhost.pid_scope()
    assert scope.startswith(socket.gethostname() + "/") and scope == localhost.pid_scope()
