"""A cgroup of each role's own, and the CPU pressure the run itself felt: discovery and reading on a
planted cgroup tree, the fallback where the host cannot make cgroups, and for real on this machine
(a role lands in a cgroup of its own, removed after the run; with two busy loops outside it, its own
``some`` pressure rises and the run is marked contended)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mxbench_train import cgroup, plan_runner
from mxbench_train.role_plan import Role

PRESSURE = "some avg10=0.00 avg60=0.00 avg300=0.00 total={some}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
BUSY = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass"


def planted(tmp_path, own="/kubepods/pod1", some=1234, mount_type="cgroup2"):
    """A cgroup tree under tmp_path/cg, the mounts and /proc/self/cgroup that name it."""
    mount = tmp_path / "cg"
    (mount / own.lstrip("/")).mkdir(parents=True)
    (mount / own.lstrip("/") / "cpu.pressure").write_text(PRESSURE.format(some=some))
    mounts = tmp_path / "mounts"
    mounts.write_text(f"proc /proc proc rw 0 0\n{mount_type} {mount} {mount_type} rw,relatime 0 0\n")
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text(f"4:memory:/elsewhere\n0::{own}\n")
    return mount, mounts, self_cgroup


def test_a_pod_reads_its_own_cgroup_under_the_v2_mount(tmp_path):
    mount, mounts, self_cgroup = planted(tmp_path)
    assert cgroup.v2_mount(mounts, {}) == mount and cgroup.own_path(self_cgroup) == "/kubepods/pod1"
    folder, source = cgroup.run_cgroup({}, True, mounts, self_cgroup)
    assert folder == mount / "kubepods" / "pod1" and source == "the pod's own cgroup"
    assert cgroup.pressure_total_us(folder) == 1234


def test_a_role_reads_the_cgroup_its_starter_made_and_nothing_else(tmp_path):
    mount, mounts, self_cgroup = planted(tmp_path, own="/mxbench-worker0-1-ab")
    made = {cgroup.CGROUP_ENV: "/mxbench-worker0-1-ab"}
    assert cgroup.run_cgroup(made, False, mounts, self_cgroup) == (mount / "mxbench-worker0-1-ab",
                                                                    "the role's own cgroup")
    elsewhere = {cgroup.CGROUP_ENV: "/mxbench-worker0-2-cd"}  # the move into it failed
    folder, source = cgroup.run_cgroup(elsewhere, False, mounts, self_cgroup)
    assert folder is None and source == ("host-wide PSI: it is in /mxbench-worker0-1-ab, not in the cgroup "
                                         "/mxbench-worker0-2-cd made for it")
    folder, source = cgroup.run_cgroup({cgroup.UNAVAILABLE_ENV: "no cgroup v2 mount"}, False, mounts, self_cgroup)
    assert folder is None and source == "host-wide PSI: no cgroup of its own (no cgroup v2 mount)"
    assert cgroup.run_cgroup({}, False, mounts, self_cgroup) == (None, "host-wide PSI: its starter made no cgroup "
                                                                       "for it")


def test_what_cannot_be_read_is_said(tmp_path):
    mount, mounts, self_cgroup = planted(tmp_path, mount_type="cgroup")  # cgroup v1 only
    assert cgroup.v2_mount(mounts, {}) is None
    assert cgroup.run_cgroup({}, True, mounts, self_cgroup) == (None, "host-wide PSI: no cgroup v2 here")
    mount, mounts, self_cgroup = planted(tmp_path / "v2")
    (mount / "kubepods" / "pod1" / "cpu.pressure").write_text("some garbage\n")  # a kernel without PSI, or odd
    folder, source = cgroup.run_cgroup({}, True, mounts, self_cgroup)
    assert folder is None and source.startswith("host-wide PSI: ") and source.endswith("cpu.pressure cannot be read")


def test_where_no_cgroup_can_be_made_the_role_runs_on_and_says_why(tmp_path):
    """The mount root pointed at a folder that is no cgroup (or is not there): no cgroup, the reason
    travels to the role, which reads the host-wide PSI and says so."""
    plain = tmp_path / "not-a-cgroup"
    plain.mkdir()
    for root, why in ((plain, f"cannot move a process into a cgroup under {plain}"),
                      (tmp_path / "missing", f"cannot make a cgroup under {tmp_path / 'missing'}: "
                                             "No such file or directory")):
        made = cgroup.RoleCgroup.make("worker0", environ={cgroup.ROOT_ENV: str(root)})
        assert made.folder is None and made.why == why
        assert made.env() == {cgroup.UNAVAILABLE_ENV: why}
        made.enter()  # nothing to enter, no error
        made.remove()
    assert list(plain.iterdir()) == []  # the half-made one was removed
    role = Role("worker0", "worker", "127.0.0.1", (sys.executable, "-c", "import os, json; print(json.dumps("
                "{k: v for k, v in os.environ.items() if k.startswith('MXBENCH_CGROUP')}))"), {})
    os.environ[cgroup.ROOT_ENV] = str(plain)
    try:
        (result,) = plan_runner.run_plan([role], tmp_path / "run", deadline_s=30)
    finally:
        del os.environ[cgroup.ROOT_ENV]
    said = json.loads(Path(result.log).read_text())
    assert said[cgroup.UNAVAILABLE_ENV] == f"cannot move a process into a cgroup under {plain}"
    assert cgroup.CGROUP_ENV not in said


FAKES = Path(__file__).resolve().parents[1] / "fixtures" / "bin"


def test_where_no_child_cgroup_can_be_made_a_working_systemd_run_gives_the_role_a_scope(tmp_path, monkeypatch):
    """The choice: a child cgroup; else a scope of systemd-run's where it works (a fake on PATH: this
    host has the binary but no systemd); else the host-wide PSI, said so. The role started through it
    knows its scope and reads that scope's own pressure, and says which source it was."""
    plain = tmp_path / "not-a-cgroup"
    plain.mkdir()
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    made = cgroup.RoleCgroup.make("worker0", environ={cgroup.ROOT_ENV: str(plain)})
    assert made.folder is None and made.scope.startswith("mxbench-worker0-") and made.why is None
    assert made.env() == {cgroup.SCOPE_ENV: made.scope}
    assert made.argv(["python", "-c", "x"]) == ["systemd-run", "--scope", "--quiet", "--collect",
                                                f"--unit={made.scope}", "--", "python", "-c", "x"]
    made.remove()  # systemd removes a scope itself: nothing to do, no error
    mount, mounts, self_cgroup = planted(tmp_path / "v2", own=f"/system.slice/{made.scope}.scope")
    folder, source = cgroup.run_cgroup(made.env(), False, mounts, self_cgroup)
    assert folder == mount / "system.slice" / f"{made.scope}.scope"
    assert source == "the role's own systemd scope (systemd-run)"
    folder, source = cgroup.run_cgroup({cgroup.SCOPE_ENV: "mxbench-other"}, False, mounts, self_cgroup)
    assert folder is None and source.startswith("host-wide PSI: it is in /system.slice/")
    # the binary there but no systemd answering it: the host-wide PSI, for the same reason as before
    monkeypatch.setenv("FAKE_SYSTEMD_DOWN", "1")
    down = cgroup.RoleCgroup.make("worker0", environ={cgroup.ROOT_ENV: str(plain)})
    assert down.scope is None and down.why == f"cannot move a process into a cgroup under {plain}"
    monkeypatch.delenv("FAKE_SYSTEMD_DOWN")
    # a role started for real goes through it and is told its scope
    role = Role("worker0", "worker", "127.0.0.1", (sys.executable, "-c", "import os, json; print(json.dumps("
                "{k: v for k, v in os.environ.items() if k.startswith('MXBENCH_CGROUP')}))"), {})
    monkeypatch.setenv(cgroup.ROOT_ENV, str(plain))
    (result,) = plan_runner.run_plan([role], tmp_path / "run", deadline_s=30)
    said = json.loads(Path(result.log).read_text())
    assert said[cgroup.SCOPE_ENV].startswith("mxbench-worker0-") and cgroup.UNAVAILABLE_ENV not in said


@pytest.mark.alone  # another process's run would sweep them first
def test_empty_cgroups_of_starters_gone_are_swept_and_busy_or_live_ones_stay(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (f"mxbench-worker0-{dead.pid}-aa", f"mxbench-worker0-{os.getpid()}-bb", "mxbench-odd", "other-1-2"):
        (tmp_path / name).mkdir()
    (tmp_path / f"mxbench-server0-{dead.pid}-cc").mkdir()
    (tmp_path / f"mxbench-server0-{dead.pid}-cc" / "busy").write_text("")  # rmdir fails: stays
    cgroup.sweep(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"mxbench-worker0-{os.getpid()}-bb", "mxbench-odd", "other-1-2", f"mxbench-server0-{dead.pid}-cc"])


def _children_of_mount():
    mount = cgroup.v2_mount()
    return {p.name for p in mount.iterdir() if p.name.startswith(cgroup.PREFIX)} if mount else set()


SHOW = ("import os, json; print(json.dumps({'cgroup': open('/proc/self/cgroup').read().splitlines()[-1], "
        "'env': os.environ.get('MXBENCH_CGROUP'), 'why': os.environ.get('MXBENCH_CGROUP_UNAVAILABLE')}))")


@pytest.mark.alone  # it lists every run's cgroup on the machine
def test_each_local_role_really_lands_in_a_cgroup_of_its_own_removed_after_the_run(tmp_path):
    """On this machine (root, cgroup v2 mounted): each role of run_plan in its own cgroup, also a
    run that failed; none is left behind."""
    before = _children_of_mount()
    roles = [Role(name, kind, "127.0.0.1", (sys.executable, "-c", SHOW), {})
             for name, kind in (("scheduler", "scheduler"), ("worker0", "worker"))]
    results = plan_runner.run_plan(roles, tmp_path / "ok", deadline_s=30)
    seen = [json.loads(Path(r.log).read_text()) for r in results]
    assert all(s["why"] is None for s in seen), seen  # this host allows it
    assert [s["cgroup"] for s in seen] == [f"0::{s['env']}" for s in seen]
    assert len({s["env"] for s in seen}) == 2 and all(s["env"].startswith("/mxbench-") for s in seen)
    failing = Role("worker0", "worker", "127.0.0.1", (sys.executable, "-c", SHOW + "; raise SystemExit(3)"), {})
    with pytest.raises(plan_runner.RoleFailed):
        plan_runner.run_plan([failing], tmp_path / "failed", deadline_s=30)
    assert _children_of_mount() - before == set()


@pytest.mark.alone  # it lists every run's cgroup on the machine
def test_the_supervised_role_of_an_ssh_host_lands_in_a_cgroup_of_its_own(tmp_path):
    before = _children_of_mount()
    # stdin stays open while the role runs: its end is the channel's, which would stop the role
    proc = subprocess.Popen([sys.executable, "-m", "mxbench_train", "supervise", "--role", "worker0", "--pid-file",
                             str(tmp_path / "pids" / "worker0.json"), "--", sys.executable, "-c", SHOW],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.stdout.read(), proc.stderr.read()  # both end when the supervisor exits
    assert proc.wait(timeout=60) == 0, err
    proc.stdin.close()
    seen = json.loads(out)
    assert seen["why"] is None and seen["env"].startswith("/mxbench-worker0-") and seen["cgroup"] == f"0::{seen['env']}"
    assert _children_of_mount() - before == set()


@pytest.mark.alone  # two busy loops: the tests beside it would be contended
def test_two_busy_loops_outside_raise_the_roles_own_pressure_and_mark_the_run_contended(tmp_path):
    """A role of two busy processes in its cgroup, with two busy loops outside it on this 2-core
    box: the role's HostWatch reads its own cgroup's pressure, and the results side marks the hogged
    run contended by it (asserting what the code computes from what the role read)."""
    from mxbench.results import contention

    # two busy processes in the role's cgroup (the role and its child), as two workers of a run on 2 cores
    watch = ("import json, subprocess, sys, time\nfrom mxbench_train import host_watch\n"
             f"child = subprocess.Popen([sys.executable, '-c', {BUSY.format(s=4)!r}])\n"
             "w = host_watch.HostWatch().start()\n"
             "end = time.time() + 3\nwhile time.time() < end: pass\nfound = w.stop()\nchild.kill()\n"
             "print(json.dumps(found))")
    role = Role("worker0", "worker", "127.0.0.1", (sys.executable, "-c", watch), {})

    def reading(name):
        (result,) = plan_runner.run_plan([role], tmp_path / name, deadline_s=60)
        return json.loads(Path(result.log).read_text().splitlines()[-1])

    hogs = [subprocess.Popen([sys.executable, "-c", BUSY.format(s=30)]) for _ in range(2)]
    try:
        time.sleep(0.5)
        hogged = reading("hogged")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert hogged["pressure_source"] == "the role's own cgroup" and len(hogged["canary_s"]) == 2
    row = contention.summarise([{"event": "run_end", "host": hogged}])
    assert row["run_pressure"] == hogged["run_pressure"] and row["pressure_source"] == "the role's own cgroup"
    assert row["contended"] is True and "its own cgroup waited for a CPU" in row["contention"], hogged
