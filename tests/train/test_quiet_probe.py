"""``python -m mxbench_train quiet-probe`` for real on this machine: one JSON line of the right shape,
and a planted CPU hog outside the probe's tree is counted as foreign, by pid, and judged not quiet.
What is asserted is what the probe computed from its readings, never how quiet this machine is."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import run_trainer
from mxbench.hosts import quiet_gate
from mxbench.results import contention
from mxbench.results.machines import fingerprint
from mxbench_train import localhost, quiet_probe, telemetry

BUSY = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass"


@pytest.fixture
def hog():
    """A process that burns a core and is nobody's descendant here (its shell exits at once): its
    pid; killed by that pid at teardown."""
    out = subprocess.run(["sh", "-c", f'{sys.executable} -c "$BUSY" >/dev/null 2>&1 & echo $!'],
                         env={**os.environ, "BUSY": BUSY.format(s=60)}, capture_output=True, text=True, check=True)
    pid = int(out.stdout)
    yield pid
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def probe(seconds="1"):
    done = run_trainer("quiet-probe", "--seconds", seconds, timeout=60)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    return json.loads(line)


def test_the_probe_prints_one_json_line_of_the_readings():
    found = probe("0.5")
    assert set(found) >= {"host", "window_s", "cpus", "load1", "cpu_pressure", "steal", "foreign_cores",
                          "foreign_top", "unreadable"}
    assert found["window_s"] >= 0.5 and found["cpus"] == os.cpu_count() and found["unreadable"] == []
    # the facts that name the kind of machine, as the trainer's environment names it: its thresholds' key
    assert fingerprint(found["machine"])[0] == fingerprint(telemetry.machine_facts())[0]
    assert found["foreign_cores"] >= sum(p["cores"] for p in found["foreign_top"]) - 0.01
    assert all(set(p) == {"pid", "name", "cores"} for p in found["foreign_top"])


def test_a_planted_hog_is_foreign_and_makes_the_host_not_quiet(hog, monkeypatch):
    """In-process, every foreign process listed (on a busy machine five others may outrank the hog)."""
    monkeypatch.setattr(quiet_probe, "TOP", 10_000)
    found = quiet_probe.sample(1.0)
    top = {p["pid"]: p for p in found["foreign_top"]}
    assert localhost.is_running(hog)  # it burned through the window
    assert hog in top, found["foreign_top"]
    assert top[hog]["name"] == "python" or top[hog]["name"].startswith("python")
    hog_cores = top[hog]["cores"]
    assert hog_cores > 0 and found["foreign_cores"] >= hog_cores
    # judged with a threshold the hog's own share reaches: not quiet, and the hog is named
    thresholds = contention.Thresholds(foreign_cores=min(hog_cores, contention.FOREIGN_CORES))
    (reason,) = quiet_gate.noisy(found, thresholds)
    busiest = ", ".join(f"{p['name']} pid {p['pid']} {p['cores']:.2f}" for p in found["foreign_top"][:3])
    assert reason == f"other processes used {found['foreign_cores']:.2f} cores ({busiest})"


def test_the_probes_own_tree_and_ancestors_are_not_foreign(hog):
    """In-process: this test process (an ancestor of nothing the probe sees) and its child are ours;
    the orphaned hog is not."""
    child = subprocess.Popen([sys.executable, "-c", BUSY.format(s=5)])
    try:
        found = quiet_probe.sample(0.5)
    finally:
        child.kill()
        child.wait()
    pids = {p["pid"] for p in found["foreign_top"]}
    assert child.pid not in pids and os.getpid() not in pids and os.getppid() not in pids


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "61", "two"])
def test_a_window_out_of_range_is_refused(seconds):
    done = run_trainer("quiet-probe", "--seconds", seconds, timeout=60)
    assert done.returncode == 2 and "--seconds" in done.stderr


def test_the_machine_facts_are_read_during_the_window_and_a_hung_nvidia_smi_is_named(tmp_path, monkeypatch):
    """nvidia-smi takes a second: hidden in the window. One that hangs: the look ends a grace after
    its window, without the facts (so the default thresholds judge the host), and says why."""
    slow = tmp_path / "nvidia-smi"
    slow.write_text("#!/bin/sh\nsleep \"$NVIDIA_SMI_SLEEP\"\nexit 1\n")
    slow.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NVIDIA_SMI_SLEEP", "0.5")
    started = time.monotonic()
    found = quiet_probe.sample(1.0)
    assert time.monotonic() - started < 1.0 + 0.5 * 2  # its call overlapped the window
    assert found["machine"]["gpu"]["available"] is False and found["unreadable"] == []
    monkeypatch.setenv("NVIDIA_SMI_SLEEP", "30")
    monkeypatch.setattr(quiet_probe, "FACTS_GRACE_S", 0.2)
    started = time.monotonic()
    found = quiet_probe.sample(0.3)
    assert time.monotonic() - started < 0.3 + 0.2 + 1.0 and found["machine"] is None
    assert found["unreadable"] == ["machine facts (nvidia-smi did not answer within 0.2 s of the window)"]
