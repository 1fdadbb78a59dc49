"""What else used the host while a worker trained: a planted CPU hog is seen as foreign, the run's
own processes (its descendants, its other roles) are not, and a signal that cannot be read is named."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mxbench.run_folder import RunFolder
from mxbench_train import cgroup, host_watch, localhost

BUSY = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass"
STAND_IN = Path(__file__).resolve().parents[1] / "fixtures" / "bin"


HOGS = []  # the hogs a test started, killed after it


def orphan_hog(seconds: float, env=None) -> int:
    """A process that burns a core and is nobody's descendant here (its shell exits at once): its pid."""
    out = subprocess.run(["sh", "-c", f'{sys.executable} -c "$BUSY" >/dev/null 2>&1 & echo $!'], env={
        **os.environ, **(env or {}), "BUSY": BUSY.format(s=seconds)}, capture_output=True, text=True, check=True)
    HOGS.append(int(out.stdout))
    return HOGS[-1]


def cpu_seconds(pid: int) -> float:
    stat = localhost.proc_stat(pid)
    return stat.cpu_ticks / host_watch.TICKS if stat else 0.0


def test_a_hog_outside_the_run_is_foreign_and_the_runs_own_child_is_not(monkeypatch):
    monkeypatch.delenv("DMLC_PS_ROOT_URI", raising=False)
    hog = orphan_hog(10)  # outlives the span, the canary timed at its start included
    own = subprocess.Popen([sys.executable, "-c", BUSY.format(s=10)])
    try:
        watch = host_watch.HostWatch().start()
        hog_before, own_before = cpu_seconds(hog), cpu_seconds(own.pid)
        time.sleep(1.5)
        hog_used, own_used = cpu_seconds(hog) - hog_before, cpu_seconds(own.pid) - own_before
        found = watch.stop()
    finally:
        own.kill()
        own.wait()
    assert hog_used > 0.1 and own_used > 0.1  # both burned CPU over the span
    # foreign: at least the hog's seconds (other processes may add), and the own child's are not in it
    tick = 1 / host_watch.TICKS
    assert found["foreign_cpu_s"] >= hog_used - 2 * tick
    assert found["wall_s"] >= 1.5 and found["cpus"] == os.cpu_count()
    for key, unread in (("cpu_pressure", "cpu pressure"), ("steal", "steal")):  # read, or said not to be
        assert (0 <= found[key] <= found["cpus"]) if key in found else \
            any(u.startswith(unread) for u in found["unreadable"]), found


def test_a_process_of_the_same_distributed_run_is_the_runs_own(monkeypatch):
    """The run's scheduler and servers share its DMLC_PS_ROOT_URI and PORT but are not the worker's children."""
    marker = {"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "49999"}
    for name, value in marker.items():
        monkeypatch.setenv(name, value)
    sibling = orphan_hog(2.0, marker)
    stranger = orphan_hog(2.0, {"DMLC_PS_ROOT_PORT": "50000"})
    time.sleep(0.3)
    watch = host_watch.HostWatch()
    foreign = {pid for pid, _ in host_watch.foreign_ticks(watch.own_root, watch.marker)}
    assert stranger in foreign and sibling not in foreign
    assert os.getppid() not in foreign  # the launcher above the worker is the harness, not a neighbour


SHORT = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.3: pass"  # 0.3 s of CPU
SHORT_LIVED = f"""import subprocess, sys, time
end = time.time() + {{s}}
while time.time() < end:  # one short process after another, each waited for: a test suite, a build
    subprocess.run([sys.executable, "-c", "{SHORT}"])
"""


def test_short_lived_processes_of_a_foreign_one_are_seen(monkeypatch):
    """A foreign process that runs short processes one after another (a test suite) burns a core though
    none of them lives through the span: their CPU shows in the process that waited for them."""
    monkeypatch.delenv("DMLC_PS_ROOT_URI", raising=False)
    out = subprocess.run(["sh", "-c", f'{sys.executable} -c "$CODE" >/dev/null 2>&1 & echo $!'], capture_output=True,
                         env={**os.environ, "CODE": SHORT_LIVED.format(s=10)}, text=True, check=True)
    HOGS.append(int(out.stdout))  # nobody's descendant here
    time.sleep(0.5)
    watch = host_watch.HostWatch().start()
    before = localhost.proc_stat(HOGS[-1])
    time.sleep(2.5)
    after = localhost.proc_stat(HOGS[-1])
    found = watch.stop()
    assert before and after and after.children_ticks > before.children_ticks  # its children ended and were waited for
    # each child lives 0.3 s of CPU at most, yet the span sees most of 2.5 s of one core (before the fix:
    # only the one child alive at the end, 0.3 s at most), and never more than the host had
    assert 1.0 <= found["foreign_cpu_s"] <= found["wall_s"] * found["cpus"], found


def test_an_ended_process_counts_once_in_the_foreign_one_that_waited_for_it():
    """``used_ticks``: a child that ended in the span had ticks before it, already in ``before``; its
    parent's children's ticks now hold them again, so they are taken off. Through a parent that ended
    too, up to the nearest one still there; a process whose parent is ours is not the foreign ones'."""
    parent, child, grandchild, new, orphan = (10, 1), (11, 1), (12, 1), (13, 1), (14, 1)
    before = {parent: 100, child: 30, grandchild: 20, orphan: 50}
    parents = {parent: 1, child: 10, grandchild: 11, orphan: 99}  # pid 99 is ours (not in before)
    # child and grandchild ended: the grandchild's 25 ticks in all went to the child, the child's 40 + 25 to
    # the parent, which itself used 10 more; a new process used 5; the orphan ended, its time is gone
    after = {parent: 100 + 10 + 40 + 25, new: 5}
    used = host_watch.used_ticks(before, after, parents)
    assert used == {parent: 10 + (40 - 30) + (25 - 20), new: 5}
    assert host_watch.used_ticks(before, {parent: 100}, parents) == {}  # nothing used: never negative


def test_what_cannot_be_read_is_named_and_the_rest_goes_on(monkeypatch, tmp_path):
    (tmp_path / "stat").write_text("cpu  100 0 50 800 0 0 0 50 0 0\n")
    monkeypatch.setattr(host_watch, "PROC", tmp_path)  # a pod without PSI
    assert host_watch.pressure_total_us(tmp_path) is None
    assert host_watch.cpu_ticks(tmp_path) == {"total": 1000, "steal": 50}
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "cpu").write_text("some avg10=1.00 avg60=2.00 avg300=52.00 total=123456\n"
                                               "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert host_watch.pressure_total_us(tmp_path) == 123456
    monkeypatch.setattr(host_watch, "pressure_total_us", lambda proc=None: None)
    found = host_watch.HostWatch().start().stop()
    assert "cpu pressure (no /proc/pressure/cpu)" in found["unreadable"] and "foreign_cpu_s" in found


def test_a_gpu_process_that_is_not_the_runs_is_foreign_and_clocks_are_read(monkeypatch):
    monkeypatch.setenv("PATH", f"{STAND_IN}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MXBENCH_FAKE_GPU_PIDS", f"{os.getpid()},1")
    found = host_watch.gpu_interference([0, 1], os.getpid(), None)
    assert [p["pid"] for p in found["gpu_foreign_processes"]] == [1]  # ours is not foreign
    assert found["gpu_clocks"] == [{"index": "0", "sm_mhz": "1980", "throttle_reasons": "0x0000000000000000"},
                                   {"index": "1", "sm_mhz": "1980", "throttle_reasons": "0x0000000000000004"}]


def test_no_gpu_tool_is_said(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert host_watch.gpu_interference([0], os.getpid(), None) == {"gpu_unreadable": "nvidia-smi not found"}


@pytest.fixture(autouse=True)
def no_leftover_hogs():
    yield
    while HOGS:
        try:
            os.kill(HOGS.pop(), 9)
        except ProcessLookupError:
            pass


def test_in_a_pod_the_other_processes_are_said_unreadable_and_the_run_cannot_be_called_quiet(monkeypatch, tmp_path):
    from mxbench.results import contention

    monkeypatch.setenv(host_watch.POD_ENV, "1")
    monkeypatch.setenv(cgroup.ROOT_ENV, str(tmp_path))  # no cgroup of its own to read either
    found = host_watch.HostWatch().start().stop()
    assert "foreign_cpu_s" not in found and "run_pressure" not in found
    assert "CPU used by other processes (a pod sees only its own processes, not its node's)" in found["unreadable"]
    assert found["pressure_source"].startswith("host-wide PSI: ")
    row = contention.summarise([{"event": "run_end", "host": found}])
    assert row["foreign_cores"] is None and row["run_pressure"] is None
    # neither, unless its canary ran slow (this machine is shared): never quiet
    assert row["contended"] is None or row["contention"].startswith("canary"), row


def test_in_a_pod_its_own_cgroup_is_read_and_the_canary_timed_around_the_span(monkeypatch, tmp_path):
    """The pod's cgroup as /proc/self/cgroup names it under the v2 mount (planted here): its own
    pressure over the span, and the canary before and after."""
    own = tmp_path / "cg" / "kubepods" / "pod1"
    own.mkdir(parents=True)
    (own / "cpu.pressure").write_text("some avg10=0 avg60=0 avg300=0 total=1000\nfull total=0\n")
    (tmp_path / "mounts").write_text(f"cgroup2 {tmp_path / 'cg'} cgroup2 rw 0 0\n")
    (tmp_path / "self").write_text("0::/kubepods/pod1\n")
    monkeypatch.setattr(cgroup, "MOUNTS", tmp_path / "mounts")
    monkeypatch.setattr(cgroup, "SELF_CGROUP", tmp_path / "self")
    monkeypatch.setenv(host_watch.POD_ENV, "1")
    watch = host_watch.HostWatch().start()
    time.sleep(0.5)
    (own / "cpu.pressure").write_text("some avg10=0 avg60=0 avg300=0 total=401000\nfull total=0\n")  # 0.4 s waited
    found = watch.stop()
    assert found["pressure_source"] == "the pod's own cgroup"
    assert found["run_pressure"] == pytest.approx(0.4 / found["wall_s"], abs=1e-3)
    before, after = found["canary_s"]
    assert 0 < before and 0 < after and found["canary_cost_s"] >= after


def test_a_failing_reading_never_costs_the_run(monkeypatch):
    def broken(*args):
        raise PermissionError("no /proc for you")

    watch = host_watch.HostWatch().start()
    monkeypatch.setattr(host_watch, "foreign_ticks", broken)
    found = host_watch.HostWatch().start().stop()
    assert found["unreadable"] == ["host watch failed at start: PermissionError: no /proc for you"]
    monkeypatch.setattr(host_watch, "cpu_ticks", broken)
    assert watch.stop()["unreadable"] == ["host watch failed: PermissionError: no /proc for you"]


@pytest.mark.alone  # a planted hog: the tests beside it would be contended
def test_real_training_beside_a_planted_hog_is_marked_contended(cifar_rec, tmp_path):
    """The trainer for real (MXNet, a tiny ResNet) while a process outside its run burns a core: its
    run_end says what the hog used, and the results side marks the run contended, naming why."""
    from conftest import run_trainer
    from mxbench.results import contention
    from mxbench_train.events import parse_event

    hog = orphan_hog(120)
    try:
        done = run_trainer("train", "--num-layers", "8", "--kv-store", "local", "--batch-size", "50",
                           "--disp-batches", "5", "--num-epochs", 1, "--data-train", cifar_rec / "cifar10_train.rec",
                           "--data-val", cifar_rec / "cifar10_val.rec", "--log-dir", tmp_path)
        hog_used = cpu_seconds(hog)
    finally:
        os.kill(HOGS.pop(), 9)
    assert done.returncode == 0, done.stderr[-2000:]
    events = [e for e in map(parse_event, (tmp_path / "rank0.log").read_text().splitlines()) if e]
    (end,) = [e for e in events if e["event"] == "run_end"]
    host = end["host"]
    # the hog ran before, during and after training, a busy loop against a trainer on two cores: a
    # fair share of a core is far above the contended threshold
    row = contention.summarise(events)
    assert row["hosts"] == host["host"]
    assert row["foreign_cores"] == pytest.approx(host["foreign_cpu_s"] / host["wall_s"])
    assert row["contended"] is True and "other processes used" in row["contention"], (row, hog_used)


@pytest.mark.alone  # two busy loops: every other test beside it would be contended, and its cgroups seen here
def test_a_local_launcher_run_beside_two_busy_loops_reads_its_own_cgroup_and_is_marked_contended(cifar_rec, tmp_path):
    """Issue 39: the local launcher puts each role in a cgroup of its own (removed after the run);
    with two busy loops outside it, the 2-worker run's workers read their own cgroup's pressure,
    time the canary around their training, and the run is marked contended."""
    from mxbench.launchers.local import LocalLauncher
    from mxbench.matrix.variants import Variant
    from mxbench.results import contention
    from mxbench_train.events import parse_event

    mount = cgroup.v2_mount()
    before = {p.name for p in mount.iterdir() if p.name.startswith(cgroup.PREFIX)}
    variant = Variant("tiny2w", "2 workers", 32, workers=2, kvstore="dist_sync", num_layers=8, epochs=1,
                      disp_batches=2)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        LocalLauncher().execute(variant, cifar_rec, RunFolder(tmp_path), deadline_s=300)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    events = [e for log in sorted(tmp_path.glob("rank*.log")) for e in map(parse_event, log.read_text().splitlines())
              if e]
    readings = contention.host_readings(events)
    assert len(readings) == 2 and all(r["pressure_source"] == "the role's own cgroup" for r in readings), readings
    assert all(len(r["canary_s"]) == 2 and r["canary_cost_s"] > 0 for r in readings)
    row = contention.summarise(events)
    assert row["run_pressure"] == max(r["run_pressure"] for r in readings)
    assert row["contended"] is True, row
    assert {p.name for p in mount.iterdir() if p.name.startswith(cgroup.PREFIX)} - before == set()
