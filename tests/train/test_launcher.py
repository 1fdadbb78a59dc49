"""The role launcher: a real 2-worker dist_sync job, and fail-fast with no process left behind."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import train_python
from mxbench_train.errors import MxbenchError
from mxbench_train.events import parse_event
from mxbench_train.launcher import LaunchTimeout, RoleFailed, run_plan
from mxbench_train.roles import Role

TINY = ("--num-layers", "8", "--batch-size", "50", "--disp-batches", "5")


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def launch(log_dir, *trainer_args, workers=2, extra=()):
    return subprocess.Popen(
        [train_python(), "-m", "mxbench_train", "launch", "--workers", str(workers), "--kv-store", "dist_sync",
         "--log-dir", str(log_dir), *extra, "--", *map(str, trainer_args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def pids(log_dir):
    return json.loads((log_dir / "pids.json").read_text())


def test_two_worker_dist_sync_job_completes_with_per_rank_logs(cifar_rec, tmp_path):
    proc = launch(tmp_path, *TINY, "--num-epochs", 2, "--data-train", cifar_rec / "cifar10_train.rec",
                  "--data-val", cifar_rec / "cifar10_val.rec")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    assert sorted(p.name for p in (tmp_path / "roles").iterdir()) == [
        "scheduler.log", "server-0.log", "server-1.log", "worker-0.log", "worker-1.log"]
    for rank in (0, 1):
        lines = (tmp_path / f"rank{rank}.log").read_text().splitlines()
        assert lines and all(f"Node[{rank}]" in line for line in lines)
        start = next(e for e in map(parse_event, lines) if e)
        assert start["rank"] == rank and start["num_workers"] == 2 and start["kvstore"] == "dist_sync"
        assert sum("Time cost=" in line for line in lines) == 2
        end = [e for e in map(parse_event, lines) if e][-1]
        assert end["status"] == "ok" and end["images_seen"] == 2 * 500  # each worker reads its half
    assert not any(alive(pid) for pid in pids(tmp_path).values())


def test_worker_crash_fails_fast_and_leaves_no_process(cifar_rec, tmp_path):
    proc = launch(tmp_path, *TINY, "--num-epochs", 500, "--data-train", cifar_rec / "cifar10_train.rec",
                  "--data-val", "")
    try:
        assert wait_for(lambda: (tmp_path / "rank1.log").is_file()
                        and "Speed:" in (tmp_path / "rank1.log").read_text())
        roles = pids(tmp_path)
        os.kill(roles["worker-1"], signal.SIGKILL)
        killed_at = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert time.monotonic() - killed_at < 15
    assert proc.returncode == 2
    assert "error: role worker-1 on host 127.0.0.1 was killed by SIGKILL" in err
    assert not [name for name, pid in roles.items() if alive(pid)]


def test_sigterm_to_the_launcher_stops_every_role(cifar_rec, tmp_path):
    proc = launch(tmp_path, *TINY, "--num-epochs", 500, "--data-train", cifar_rec / "cifar10_train.rec",
                  "--data-val", "")
    try:
        assert wait_for(lambda: (tmp_path / "pids.json").is_file() and (tmp_path / "rank0.log").is_file())
        roles = pids(tmp_path)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2 and "launcher got SIGTERM" in err
    assert not [name for name, pid in roles.items() if alive(pid)]


def test_deadline_kills_a_job_that_runs_too_long(cifar_rec, tmp_path):
    proc = launch(tmp_path, *TINY, "--num-epochs", 500, "--data-train", cifar_rec / "cifar10_train.rec",
                  "--data-val", "", extra=("--deadline", "4"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "passed its 4 s deadline" in err
    assert not [name for name, pid in pids(tmp_path).items() if alive(pid)]


def sleeper(name, kind, code=None, seconds=60):
    body = f"import sys, time; time.sleep({seconds}); sys.exit({code or 0})"
    return Role(name, kind, "127.0.0.1", (sys.executable, "-c", body), {})


def test_first_failing_role_is_named_with_its_exit_code(tmp_path):
    plan = [sleeper("scheduler", "scheduler"), sleeper("worker-0", "worker"),
            sleeper("worker-1", "worker", code=7, seconds=0.2)]
    started = time.monotonic()
    with pytest.raises(RoleFailed, match="role worker-1 on host 127.0.0.1 exited with code 7"):
        run_plan(plan, tmp_path, deadline_s=60)
    assert time.monotonic() - started < 10
    assert not any(alive(pid) for pid in pids(tmp_path).values())


def test_lingering_scheduler_is_stopped_after_workers_succeed(tmp_path, monkeypatch):
    monkeypatch.setattr("mxbench_train.launcher.SHUTDOWN_GRACE_S", 0.5)
    plan = [sleeper("scheduler", "scheduler", seconds=600), sleeper("worker-0", "worker", seconds=0.1)]
    results = run_plan(plan, tmp_path, deadline_s=30)
    assert [r.returncode for r in results][1] == 0
    assert not any(alive(r.pid) for r in results)


def test_launch_refuses_a_bad_job_before_starting_anything(tmp_path):
    done = subprocess.run([train_python(), "-m", "mxbench_train", "launch", "--workers", "2", "--kv-store", "local",
                           "--log-dir", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and "launch: kvstore 'local' runs one worker" in done.stderr
    assert not (tmp_path / "pids.json").exists()
    assert issubclass(LaunchTimeout, MxbenchError)


def test_a_role_that_cannot_start_is_named_and_the_started_ones_stopped(tmp_path):
    plan = [sleeper("scheduler", "scheduler"),
            Role("worker-0", "worker", "127.0.0.1", (str(tmp_path / "no-such-python"), "-m", "x"), {})]
    with pytest.raises(MxbenchError, match="cannot start role worker-0 on host 127.0.0.1: .*no-such-python"):
        run_plan(plan, tmp_path, deadline_s=30)
    started = pids(tmp_path)
    assert list(started) == ["scheduler"] and not alive(started["scheduler"])
