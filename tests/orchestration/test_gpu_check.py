"""benchmarks/gpu_check.sh on a machine with no GPU: a fake nvidia-smi reports an H200 (sm_90), and the check
must stop with its one clear line, exit 3, before any data is made or training starts."""
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, train_python

SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
FAKE_NVIDIA_SMI = REPO / "tests" / "fixtures" / "bin" / "nvidia-smi"
# docker/README.md: what the stock mxnet-cu112==1.9.1 wheel's libmxnet.so carries
STOCK_WHEEL_CUBINS = (50, 60, 70, 80, 86)


def fake_gpu_bin(folder, compute_cap):
    """FOLDER/nvidia-smi: answers gpu_check's name/driver/compute_cap query, the rest is the fixture's."""
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / "nvidia-smi"
    program.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--query-gpu=name,driver_version,compute_cap" ]; then\n'
        f'  echo "NVIDIA H200, 550.54.15, {compute_cap}"; exit 0\n'
        "fi\n"
        f'exec "{FAKE_NVIDIA_SMI}" "$@"\n')
    program.chmod(0o755)
    return folder


def run_check(tmp_path, venv, compute_cap="9.0"):
    # no cuobjdump: the script's own reading of the ELF is what is tested, whatever this machine has
    path = [str(fake_gpu_bin(tmp_path / "bin", compute_cap))]
    path += [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "cuobjdump").exists()]
    env = dict(os.environ, PATH=os.pathsep.join(path), OUT=str(tmp_path / "out"), MXBENCH_GPU_VENV=str(venv),
               MXBENCH_GPU_PACKAGE="mxnet-cu112==1.9.1")
    return subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def assert_stopped_before_training(done, out):
    assert done.returncode == 3, done.stdout + done.stderr
    assert "== 4." not in done.stdout and not (out / "train").exists() and not (out / "prepare.json").exists()
    gpu = "GPU 0: NVIDIA H200, driver 550.54.15, CUDA 12.4 (the driver's), compute capability 9.0 (sm_90)"
    assert gpu in done.stdout
    assert done.stdout == (out / "gpu_check.log").read_text()  # everything shown is kept under OUT


def test_cpu_wheel_stops_on_sm_90_before_training(tmp_path):
    done = run_check(tmp_path, Path(train_python()).parents[1])
    assert_stopped_before_training(done, tmp_path / "out")
    assert "no .nv_fatbin" in done.stdout
    stop = [line for line in done.stdout.splitlines() if line.startswith("gpu_check: ")]
    assert len(stop) == 1 and re.fullmatch(
        r"gpu_check: the stock wheel mxnet==\S+ has no CUDA kernels: a CPU build; it cannot run on this sm_90 GPU; "
        r"build from source with docker/train-source\.Dockerfile", stop[0]), done.stdout


def elf_with_fatbin(path, cubins=(), ptx=()):
    """A 64-bit ELF whose .nv_fatbin section holds one fatbinary per arch, padded apart as a linker may leave
    them: the layout gpu_check.sh reads (checked there against nvcc 13's output)."""
    section = b""
    for kind, arch in [(2, a) for a in cubins] + [(1, a) for a in ptx]:
        payload = bytes(8)
        entry = struct.pack("<HHIQIIHHI", kind, 0x0101, 64, len(payload), 0, 0, arch % 10, arch // 10, arch)
        entry = entry.ljust(64, b"\0") + payload
        section += struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entry)) + entry + bytes(8)
    names = b"\0.nv_fatbin\0.shstrtab\0"
    fatbin_at, names_at = 64, 64 + len(section)
    table_at = names_at + len(names)
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01", 3, 62, 1, 0, 0, table_at, 0, 64, 0, 0, 64, 3, 2)
    sections = [bytes(64),
                struct.pack("<IIQQQQIIQQ", 1, 1, 2, 0, fatbin_at, len(section), 0, 0, 8, 0),
                struct.pack("<IIQQQQIIQQ", 12, 3, 0, 0, names_at, len(names), 0, 0, 1, 0)]
    path.write_bytes(header + section + names + b"".join(sections))


@pytest.fixture
def stock_like_venv(tmp_path):
    """A venv whose mxnet package is only a libmxnet.so with the stock wheel's kernels (no metadata: the script
    names MXBENCH_GPU_PACKAGE)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    package = next(venv.glob("lib/python3*/site-packages")) / "mxnet"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('a stand-in: gpu_check must never import it')\n")
    elf_with_fatbin(package / "libmxnet.so", cubins=STOCK_WHEEL_CUBINS)
    return venv


def test_stock_cuda_wheel_kernels_stop_on_sm_90_before_training(tmp_path, stock_like_venv):
    done = run_check(tmp_path, stock_like_venv)
    assert_stopped_before_training(done, tmp_path / "out")
    assert ("libmxnet.so (read from its .nv_fatbin section, 5 fatbinaries): SASS sm_50, sm_60, sm_70, sm_80, sm_86; "
            "PTX none") in done.stdout
    assert done.stdout.splitlines()[-1] == (
        "gpu_check: the stock wheel mxnet-cu112==1.9.1 has kernels for sm_50, sm_60, sm_70, sm_80, sm_86 only, "
        "no PTX: it cannot run on this sm_90 GPU; build from source with docker/train-source.Dockerfile")
