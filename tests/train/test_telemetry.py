"""GPU telemetry through nvidia-smi, against a stand-in nvidia-smi that prints its real CSV."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_trainer
from mxbench_train import telemetry
from mxbench_train.events import parse_event
from mxbench_train.localhost import is_running
from support.waiting import wait_for

STAND_IN = Path(__file__).resolve().parents[1] / "fixtures" / "bin"


@pytest.fixture
def fake_gpus(monkeypatch):
    monkeypatch.setenv("PATH", f"{STAND_IN}{os.pathsep}{os.environ['PATH']}")


def test_sampler_records_utilisation_and_memory_per_gpu(fake_gpus, tmp_path):
    sampler = telemetry.GpuSampler([0, 1], tmp_path / "gpu.csv", topo_path=tmp_path / "topo.txt",
                                   period_ms=50).start()
    time.sleep(0.6)
    summary = sampler.stop()
    assert summary["available"] is True and summary["csv"] == "gpu.csv"
    first, second = summary["per_gpu"]
    assert first["index"] == 0 and first["name"] == "NVIDIA H200" and first["samples"] >= 5
    assert 85 <= first["utilization_mean_pct"] <= 94 and first["memory_used_max_mib"] == 1455
    assert second["memory_used_max_mib"] == 1465
    assert second["samples"] == first["samples"] - 1  # the "[N/A]" reading is skipped, not a crash
    assert "NV18" in (tmp_path / "topo.txt").read_text()


def test_csv_reader_skips_headers_and_cut_off_lines(tmp_path):
    path = tmp_path / "gpu.csv"
    path.write_text("timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
                    "2026/12/02 10:00:00.000, 0, Tesla V100, 90 %, 1455 MiB, 16160 MiB\n"
                    "2026/12/02 10:00:00.500, 0, Tesla V100, 80 %, 1466 MiB, 16160 MiB\n"
                    "2026/12/02 10:00:01.000, 0, Tesla V1")
    rows = telemetry.read_gpu_csv(path)
    assert [r["utilization_pct"] for r in rows] == [90, 80]
    assert telemetry.summarise(rows) == [{"index": 0, "name": "Tesla V100", "samples": 2,
                                          "utilization_mean_pct": 85.0, "memory_used_max_mib": 1466}]


def test_no_gpu_is_recorded_and_sampling_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi anywhere
    sampler = telemetry.GpuSampler([0], tmp_path / "gpu.csv").start()
    assert sampler.stop() == {"available": False, "reason": "nvidia-smi not found"}
    assert telemetry.gpu_environment() == {"available": False, "reason": "nvidia-smi not found"}


def test_environment_capture_reports_gpu_model_driver_and_cuda(fake_gpus):
    env = telemetry.gpu_environment()
    assert env["driver"] == "550.54.15" and env["cuda"] == "12.4"
    assert [g["name"] for g in env["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]


def test_trainer_start_event_carries_the_gpu_environment(tmp_path):
    env = {**os.environ, "PATH": f"{STAND_IN}{os.pathsep}{os.environ['PATH']}"}
    done = run_trainer("train", "--num-layers", "8", "--kv-store", "local", "--batch-size", "50", "--benchmark", 1,
                       "--num-examples", 100, "--num-epochs", 1, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    start = next(e for e in map(parse_event, done.stdout.splitlines()) if e)
    assert start["environment"]["gpu"]["driver"] == "550.54.15"
    assert start["environment"]["cpu_model"] and start["environment"]["python"].startswith("3.")


SAMPLING_TRAINER = r"""
import sys, time
from mxbench_train import telemetry
sampler = telemetry.GpuSampler([0, 1], sys.argv[1], period_ms=100).start()
print(sampler.proc.pid, flush=True)
time.sleep(300)
"""


def test_a_sigkilled_trainer_takes_its_gpu_sampler_with_it(fake_gpus, tmp_path):
    trainer = subprocess.Popen([sys.executable, "-c", SAMPLING_TRAINER, tmp_path / "gpu.csv"],
                               stdout=subprocess.PIPE, text=True)
    try:
        sampler_pid = int(trainer.stdout.readline())
        assert is_running(sampler_pid)
        trainer.kill()
        trainer.wait()
        wait_for(lambda: not is_running(sampler_pid), timeout=5)
        assert not is_running(sampler_pid)
    finally:
        trainer.kill()
