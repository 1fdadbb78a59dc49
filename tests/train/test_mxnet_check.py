"""``python -m mxbench_train mxnet-check`` (what the images' builds run) and mxbench_train.elf, the
ELF reading behind it: against the real CPU wheel of .venv/train, and fatbinaries made here."""
import struct

import pytest

from conftest import run_trainer
from mxbench_train.elf import ElfError, fatbin_archs, required_archs


def test_check_passes_on_what_the_cpu_wheel_has_and_lists_it():
    done = run_trainer("mxnet-check", "--features", "OPENMP,OPENCV,DIST_KVSTORE", timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("mxnet 1.9.1 (") and "OPENCV" in done.stdout
    assert "GPU kernels SASS none, PTX none" in done.stdout  # a CPU build: no .nv_fatbin


def test_check_fails_naming_each_missing_feature_and_arch():
    done = run_trainer("mxnet-check", "--features", "OPENCV,CUDA,NCCL", "--archs", "8.0;9.0+PTX", timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().endswith("lacks CUDA, NCCL, sm_80, sm_90, compute_90"), done.stderr


def test_check_refuses_arch_names():
    done = run_trainer("mxnet-check", "--archs", "Hopper", timeout=120)
    assert done.returncode != 0 and "give compute capabilities as numbers" in done.stderr, done.stderr


@pytest.mark.parametrize("spec, cubins, ptx", [
    ("7.0;7.5;8.0;8.6;9.0+PTX", {70, 75, 80, 86, 90}, {90}),
    ("8.6(8.0)", {86}, set()),
    ("", set(), set()),
])
def test_required_archs_reads_mxnets_arch_list(spec, cubins, ptx):
    assert required_archs(spec) == (cubins, ptx)


def test_required_archs_refuses_a_malformed_entry():
    with pytest.raises(ElfError, match="'9'"):
        required_archs("8.0;9")


def test_fatbin_archs_reads_cubins_and_ptx():
    def fatbin(entries):
        body = b"".join(struct.pack("<HHIQ", kind, 0, 32, 0) + bytes(12) + struct.pack("<I", arch)
                        for kind, arch in entries)
        return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body
    section = fatbin([(2, 80), (2, 90)]) + bytes(8) + fatbin([(1, 90)])  # padded apart
    assert fatbin_archs(section) == ({80, 90}, {90}, 2)
