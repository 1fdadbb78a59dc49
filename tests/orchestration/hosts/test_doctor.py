"""``mxbench doctor`` over planted /proc and /sys trees: each poor setting is found with its fix, a good
one reads ok, and a file it cannot read is named; the GPU checks through an injected nvidia-smi."""
from pathlib import Path

import pytest

from mxbench import cli
from mxbench.hosts import doctor

CPU = "sys/devices/system/cpu"


def plant(root: Path, files: dict) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


POOR = {
    "proc/loadavg": "3.10 2.00 1.50 4/300 12345\n",
    f"{CPU}/online": "0-3\n",
    **{f"{CPU}/cpu{i}/cpufreq/scaling_governor": "powersave\n" if i < 3 else "performance\n" for i in range(4)},
    f"{CPU}/intel_pstate/no_turbo": "0\n",
    "proc/meminfo": "MemTotal:       16000000 kB\nSwapTotal:       2097152 kB\nSwapFree:        1048576 kB\n",
    "proc/swaps": "Filename\tType\tSize\tUsed\tPriority\n/swap.img\tfile\t2097152\t1048576\t-2\n",
    "sys/kernel/mm/transparent_hugepage/enabled": "[always] madvise never\n",
    "proc/pressure/cpu": "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n",
    "proc/stat": "cpu  100 0 100 700 0 0 0 100 0 0\n",
}
GOOD = {
    "proc/loadavg": "0.05 0.10 0.10 1/300 12345\n",
    f"{CPU}/online": "0-3\n",
    **{f"{CPU}/cpu{i}/cpufreq/scaling_governor": "performance\n" for i in range(4)},
    f"{CPU}/cpufreq/boost": "0\n",
    "proc/meminfo": "MemTotal:       16000000 kB\nSwapTotal:       0 kB\nSwapFree:        0 kB\n",
    "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
    "proc/pressure/cpu": "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n",
    "proc/stat": "cpu  100 0 100 700 0 0 0 100 0 0\n",
}


def busy_second(root: Path):
    """A sleep that moves the counters on as a busy, stolen-from second would: 0.4 s of pressure,
    100 of 1000 ticks stolen."""
    def sleep(seconds):
        plant(root, {"proc/pressure/cpu": "some avg10=0.00 avg60=0.00 avg300=0.00 total=1400000\n",
                     "proc/stat": "cpu  500 0 200 1100 0 0 0 200 0 0\n"})
    return sleep


def no_gpu_tool(*args):
    return None, "nvidia-smi not found"


def by_item(findings):
    return {f.item: f for f in findings}


def test_every_poor_setting_is_found_with_its_fix(tmp_path):
    root = plant(tmp_path, POOR)
    found = by_item(doctor.diagnose(root, 1.0, smi=no_gpu_tool, sleep=busy_second(root)))
    assert {item for item, f in found.items() if f.status == "poor"} == {
        "load", "cpu governor", "turbo", "swap", "transparent huge pages", "cpu pressure", "steal"}
    assert found["load"].seen == "load average 3.10 over the last minute on 4 cores"
    assert found["cpu governor"].seen.startswith("performance on cpu3; powersave on cpu0-2")
    assert found["cpu governor"].fix == "sudo cpupower frequency-set -g performance"
    assert found["turbo"].fix == f"echo 1 | sudo tee /{CPU}/intel_pstate/no_turbo"
    assert found["swap"].seen.startswith("1024 MiB of 2048 MiB in use on 1 device(s)")
    assert "swapoff -a" in found["swap"].fix
    assert found["transparent huge pages"].fix == "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled"
    assert found["cpu pressure"].seen == "a task waited for a CPU 40% of the last 1 s"
    assert found["steal"].seen == "10% of the CPU time given to other guests over the last 1 s"
    assert found["gpu"].status == "n/a" and found["gpu"].seen == "no GPU tool (nvidia-smi not found)"
    assert all(f.fix for f in found.values() if f.status == "poor")


def test_a_good_host_reads_ok(tmp_path):
    found = by_item(doctor.diagnose(plant(tmp_path, GOOD), 1.0, smi=no_gpu_tool, sleep=lambda s: None))
    assert {item: f.status for item, f in found.items()} == {
        "load": "ok", "cpu governor": "ok", "turbo": "ok", "swap": "ok", "transparent huge pages": "ok",
        "cpu pressure": "ok", "steal": "ok", "gpu": "n/a"}
    assert found["turbo"].seen == "off (cpufreq boost)" and found["swap"].seen == "no swap"


def test_what_cannot_be_read_is_named(tmp_path):
    found = by_item(doctor.diagnose(plant(tmp_path, {"proc/loadavg": "garbage"}), 0, smi=no_gpu_tool,
                                    sleep=lambda s: None))
    assert {item for item, f in found.items() if f.status == "unreadable"} == {
        "load", "cpu governor", "turbo", "swap", "transparent huge pages", "cpu pressure", "steal"}
    assert found["load"].seen == "cannot read /proc/loadavg"
    assert found["turbo"].seen == (f"cannot read /{CPU}/intel_pstate/no_turbo or /{CPU}/cpufreq/boost")
    assert found["cpu pressure"].seen == "cannot read /proc/pressure/cpu"
    assert found["cpu governor"].seen.startswith(f"no /{CPU}/cpu*/cpufreq/scaling_governor")


def fake_smi(apps: str, gpus: str):
    def smi(*args):
        return (apps if args[0].startswith("--query-compute-apps") else gpus), None
    return smi


def test_gpu_processes_persistence_and_held_clocks_are_found():
    found = doctor.check_gpus(fake_smi("4242, python, 1455\n",
                                       "0, Disabled, 1410, 1980, 0x0000000000000004\n"
                                       "1, Enabled, 1980, 1980, 0x0000000000000001\n"))
    lines = [f.line() for f in found]
    assert lines[0] == ("poor        gpu processes: 1 running: python pid 4242 (1455 MiB)  -> fix: stop them, or "
                        "run on other GPUs")
    assert lines[1].startswith("poor        gpu persistence mode: off on GPU 0") and "sudo nvidia-smi -pm 1" in lines[1]
    assert found[2].status == "poor" and "sudo nvidia-smi -i 0 -lgc 1980,1980" in found[2].fix
    assert found[3].status == "ok"
    assert found[3].seen == "GPU 1: SM 1980 of 1980 MHz, throttle reasons 0x0000000000000001"
    quiet = doctor.check_gpus(fake_smi("", "0, Enabled, 1980, 1980, 0x0000000000000000\n"))
    assert [f.status for f in quiet] == ["ok", "ok", "ok"]


def test_the_command_prints_every_finding_and_exits_0(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi
    assert cli.main(["doctor", "--root", str(plant(tmp_path, POOR)), "--seconds", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("mxbench doctor: this machine as a benchmark host: 5 poor, 0 unreadable")
    assert len(out) == 1 + 8 and any(line.startswith("poor        swap: 1024 MiB") for line in out)


@pytest.mark.parametrize("online, count", [("0-3\n", 4), ("0,2-3,8\n", 4), ("0\n", 1)])
def test_online_cores(tmp_path, online, count):
    assert doctor.cores(plant(tmp_path, {f"{CPU}/online": online})) == count
