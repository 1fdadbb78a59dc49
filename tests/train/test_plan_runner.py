"""The plan runner (``mxbench_train.plan_runner``, ``python -m mxbench_train launch``): a real 2-worker
dist_sync job, and fail-fast with no process left behind."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import train_python
from mxbench_train.errors import MxbenchError
from mxbench_train.events import parse_event
from mxbench_train.localhost import is_running, start_ticks
from mxbench_train.plan_runner import LaunchTimeout, RoleFailed, reap, run_plan
from mxbench_train.role_plan import Role
from support.waiting import wait_for

pytestmark = pytest.mark.slow  # multi-process MXNet jobs, killed and reaped

TINY = ("--num-layers", "8", "--batch-size", "50", "--disp-batches", "5")


def launch(log_dir, *trainer_args, workers=2, extra=()):
    return subprocess.Popen(
        [train_python(), "-m", "mxbench_train", "launch", "--workers", str(workers), "--kv-store", "dist_sync",
         "--log-dir", str(log_dir), *extra, "--", *map(str, trainer_args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pids(log_dir):
    return {name: record["pid"] for name, record in json.loads((log_dir / "pids.json").read_text()).items()}


def kill_groups(pids):
    """Clean up after a test that failed to."""
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def test_two_worker_dist_sync_job_completes_with_per_rank_logs(cifar_rec, tmp_path):
    proc = launch(tmp_path, *TINY, "--num-epochs", 2, "--data-train", cifar_rec / "cifar10_train.rec",
                  "--data-val", cifar_rec / "cifar10_val.rec")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    # the scheduler (kvstore_scheduler, no mxnet package) and the servers end by themselves once the workers do
    for role in ("scheduler", "server-0", "server-1"):
        assert f"{role}@127.0.0.1: exit 0," in out, out
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
    assert not any(is_running(pid) for pid in pids(tmp_path).values())


def test_worker_crash_fails_fast_and_leaves_no_process(cifar_rec, tmp_path):
    proc = launch(tmp_path, *TINY, "--num-epochs", 500, "--data-train", cifar_rec / "cifar10_train.rec",
                  "--data-val", "")
    try:
        assert wait_for(lambda: (tmp_path / "rank1.log").is_file()
                        and "Speed:" in (tmp_path / "rank1.log").read_text(), timeout=120)
        roles = pids(tmp_path)
        os.kill(roles["worker-1"], signal.SIGKILL)
        killed_at = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert time.monotonic() - killed_at < 15
    assert proc.returncode == 2
    assert "error: role worker-1 on host 127.0.0.1 was killed by SIGKILL" in err
    assert not [name for name, pid in roles.items() if is_running(pid)]


def test_sigterm_to_the_launcher_stops_every_role(cifar_rec, tmp_path):
    proc = launch(tmp_path, *TINY, "--num-epochs", 500, "--data-train", cifar_rec / "cifar10_train.rec",
                  "--data-val", "")
    try:
        assert wait_for(lambda: (tmp_path / "pids.json").is_file() and (tmp_path / "rank0.log").is_file(),
                        timeout=120)
        roles = pids(tmp_path)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2 and "launcher got SIGTERM" in err
    assert not [name for name, pid in roles.items() if is_running(pid)]


def test_sigkill_of_the_launcher_takes_every_role_with_it(cifar_rec, tmp_path):
    proc = launch(tmp_path, *TINY, "--num-epochs", 500, "--data-train", cifar_rec / "cifar10_train.rec",
                  "--data-val", "")
    roles = {}
    try:
        assert wait_for(lambda: all((tmp_path / f"rank{r}.log").is_file()
                                    and "Speed:" in (tmp_path / f"rank{r}.log").read_text() for r in (0, 1)),
                        timeout=120)
        roles = pids(tmp_path)
        assert len(roles) == 5 and all(is_running(pid) for pid in roles.values())
        proc.kill()  # as the OOM killer or a worker eviction would: no cleanup runs in the launcher
        proc.wait()
        assert wait_for(lambda: not any(is_running(pid) for pid in roles.values()), timeout=5), \
            [name for name, pid in roles.items() if is_running(pid)]
    finally:
        proc.kill()
        kill_groups(roles.values())


def test_deadline_kills_a_job_that_runs_too_long(cifar_rec, tmp_path):
    proc = launch(tmp_path, *TINY, "--num-epochs", 500, "--data-train", cifar_rec / "cifar10_train.rec",
                  "--data-val", "", extra=("--deadline", "4"))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "passed its 4 s deadline" in err
    assert not [name for name, pid in pids(tmp_path).items() if is_running(pid)]


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
    assert not any(is_running(pid) for pid in pids(tmp_path).values())


def test_lingering_scheduler_is_stopped_after_workers_succeed(tmp_path, monkeypatch):
    monkeypatch.setattr("mxbench_train.plan_runner.SHUTDOWN_GRACE_S", 0.5)
    plan = [sleeper("scheduler", "scheduler", seconds=600), sleeper("worker-0", "worker", seconds=0.1)]
    results = run_plan(plan, tmp_path, deadline_s=30)
    assert [r.returncode for r in results] == [-signal.SIGTERM, 0]
    assert [r.warning for r in results] == [None, None]  # killed by the teardown, not by itself
    assert not any(is_running(r.pid) for r in results)


def test_a_sigterm_that_a_role_handle_swallows_still_stops_the_job(tmp_path):
    """A handle's poll may wrap an API call in a broad except (the Kubernetes one does): the
    SIGTERM raised inside it must still end the job as interrupted, not let it run on."""
    from mxbench_train.plan_runner import LaunchInterrupted, LocalProcess

    class Swallowing(LocalProcess):
        def poll(self):
            try:
                time.sleep(0.05)  # where SIGTERM lands: inside a call whose errors are kept for later
            except Exception:
                pass
            return super().poll()

    plan = [sleeper("scheduler", "scheduler", seconds=600), sleeper("worker-0", "worker", seconds=600)]
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    started = time.monotonic()
    with pytest.raises(LaunchInterrupted, match="launcher got SIGTERM"):
        run_plan(plan, tmp_path, deadline_s=60, start=lambda role, log: Swallowing(role, log))
    assert time.monotonic() - started < 30
    assert not any(is_running(pid) for pid in pids(tmp_path).values())
    assert signal.getsignal(signal.SIGTERM) is not None  # the handler before run_plan is back


def role(name, kind, body):
    return Role(name, kind, "127.0.0.1", (sys.executable, "-c", body), {})


ABORT = "import os, resource, time; resource.setrlimit(resource.RLIMIT_CORE, (0, 0)); time.sleep({}); os.abort()"


def test_scheduler_aborting_after_the_workers_succeeded_keeps_the_results_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr("mxbench_train.plan_runner.SHUTDOWN_GRACE_S", 2.0)
    plan = [role("scheduler", "scheduler", ABORT.format(0.5)), sleeper("server-0", "server", seconds=600),
            role("worker-0", "worker", "print('done')"), role("worker-1", "worker", "print('done')")]
    results = run_plan(plan, tmp_path, deadline_s=30, cwd=tmp_path)
    assert [r.returncode for r in results] == [-signal.SIGABRT, -signal.SIGTERM, 0, 0]
    assert results[0].warning.startswith("scheduler on host 127.0.0.1 was killed by SIGABRT, but every worker "
                                         "exited 0")
    assert [r.warning for r in results[1:]] == [None, None, None]  # the server was killed by the teardown
    assert not any(is_running(r.pid) for r in results)


def test_scheduler_aborting_just_before_the_last_worker_exits_0_is_a_warning(tmp_path):
    plan = [role("scheduler", "scheduler", ABORT.format(0.2)),
            role("worker-0", "worker", "import time; time.sleep(1); print('done')")]
    results = run_plan(plan, tmp_path, deadline_s=30, cwd=tmp_path)
    assert [r.returncode for r in results] == [-signal.SIGABRT, 0]
    assert "SIGABRT" in results[0].warning and results[1].warning is None


def test_scheduler_aborting_while_a_worker_runs_fails_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr("mxbench_train.plan_runner.ROLE_EXIT_GRACE_S", 1.0)
    plan = [role("scheduler", "scheduler", ABORT.format(0.5)), sleeper("worker-0", "worker", seconds=60)]
    started = time.monotonic()
    with pytest.raises(RoleFailed, match="role scheduler on host 127.0.0.1 was killed by SIGABRT"):
        run_plan(plan, tmp_path, deadline_s=30, cwd=tmp_path)
    assert time.monotonic() - started < 10
    assert not any(is_running(pid) for pid in pids(tmp_path).values())


LEAVES_A_CHILD = "sleep 300 & echo $! > {}; wait"


def test_reap_kills_what_a_stuck_earlier_attempt_left_with_the_roles_children(tmp_path):
    child_pid = tmp_path / "child.pid"
    plan = [Role("scheduler", "scheduler", "127.0.0.1", ("sh", "-c", LEAVES_A_CHILD.format(child_pid)), {}),
            sleeper("worker-0", "worker", seconds=300)]
    script = ("import json, sys; from mxbench_train.plan_runner import run_plan; "
              "from mxbench_train.role_plan import Role; "
              "run_plan([Role.from_dict(r) for r in json.loads(sys.argv[1])], sys.argv[2])")
    attempt = subprocess.Popen([sys.executable, "-c", script, json.dumps([r.to_dict() for r in plan]), str(tmp_path)])
    roles = {}
    try:
        assert wait_for(lambda: child_pid.is_file() and child_pid.read_text().strip()
                        and (tmp_path / "pids.json").is_file() and len(pids(tmp_path)) == 2, timeout=30)
        roles, child = pids(tmp_path), int(child_pid.read_text())
        records = json.loads((tmp_path / "pids.json").read_text())
        assert all(records[name]["start"] == start_ticks(pid) for name, pid in roles.items())
        attempt.send_signal(signal.SIGSTOP)  # a hung launcher: alive, but it stops nothing any more
        assert sorted(reap(tmp_path / "pids.json")) == sorted(roles.items())
        assert not [name for name, pid in roles.items() if is_running(pid)] and not is_running(child)
    finally:
        attempt.kill()
        attempt.wait()
        kill_groups(roles.values())


def test_reap_kills_the_group_of_a_role_that_is_gone(tmp_path):
    child_pid = tmp_path / "child.pid"
    leader = subprocess.Popen(["sh", "-c", LEAVES_A_CHILD.format(child_pid)], start_new_session=True)
    try:
        (tmp_path / "pids.json").write_text(json.dumps({"worker-0": {"pid": leader.pid,
                                                                     "start": start_ticks(leader.pid)}}))
        assert wait_for(lambda: child_pid.is_file() and child_pid.read_text().strip(), timeout=30)
        child = int(child_pid.read_text())
        leader.kill()  # as PR_SET_PDEATHSIG kills a worker, leaving its nvidia-smi sampler
        leader.wait()
        assert is_running(child)
        assert reap(tmp_path / "pids.json") == [("worker-0", leader.pid)]
        assert wait_for(lambda: not is_running(child), timeout=5)
    finally:
        kill_groups([leader.pid])


def test_reap_leaves_a_process_alone_whose_pid_was_reused(tmp_path):
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        (tmp_path / "pids.json").write_text(json.dumps({
            "worker-0": {"pid": stranger.pid, "start": start_ticks(stranger.pid) + 1},  # another process had it
            "worker-1": {"pid": gone.pid, "start": 1},
            "server-0": stranger.pid}))  # no start time recorded: cannot be told apart, so left alone
        assert reap(tmp_path / "pids.json") == []
        assert is_running(stranger.pid)
        assert reap(tmp_path / "no-such-attempt" / "pids.json") == []
    finally:
        stranger.kill()
        stranger.wait()


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
    assert list(started) == ["scheduler"] and not is_running(started["scheduler"])
