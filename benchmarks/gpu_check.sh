#!/usr/bin/env bash
# One-command check of a fresh GPU machine (needs python3 and an NVIDIA driver; no Docker), from the repo root:
#   benchmarks/gpu_check.sh
# 1. the GPU: name, driver, CUDA version, compute capability (of GPU 0, the one trained on);
# 2. a training venv .venv/gpu: MXBENCH_GPU_PACKAGE (default mxnet-cu112==1.9.1) in place of requirements-train.txt's
#    mxnet line, its other pins, the trainer (-e tasks/); rebuilt only when those change (a stamp, as setup.sh does);
# 3. which GPU archs the wheel's libmxnet.so has kernels for (cuobjdump if on PATH, else this script reads the ELF's
#    .nv_fatbin section); exits 3 BEFORE training when none runs on this GPU (the stock wheels stop at sm_86:
#    docker/README.md), and 4 when libmxnet.so's CUDA libraries are missing;
# 4. the seed's 1-GPU variant (1gpu-bs128: ResNet-110, batch 128, kvstore device) for 2 epochs on SYNTHETIC
#    CIFAR-format data, with the trainer's GPU sampler and topology capture, then prints steady-state samples/s
#    (Speedometer readings after the first epoch), s/epoch, mean GPU utilisation, peak memory and the topology.
# What it is not: a benchmark of record. Few images, 2 epochs, one run; the pipeline's seed preset is that.
# Everything it writes is under ${OUT:-/tmp/gpu_check} (gpu_check.log, nvidia-smi.txt, train/: rank0.log,
# trainer.log, gpu-rank0.csv, gpu-topo.txt), so a remote runner can bring it back; the data set goes in a scratch
# folder that is removed at exit. About 8 minutes on one H200, most of it the venv's download.
# Knobs: OUT; MXBENCH_GPU_PACKAGE; MXBENCH_GPU_VENV (use this existing venv as it is: no install, no stamp);
# MXBENCH_PYTHON (the python that makes .venv/gpu); MXBENCH_GPU_IMAGES (synthetic training images, default 12800:
# 100 batches an epoch); MXBENCH_GPU_TRAIN_TIMEOUT (seconds, default 300).
# Exit: 0 trained; 3 the wheel cannot run on this GPU; 4 libraries missing; anything else: a step failed (it says).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-/tmp/gpu_check}
PACKAGE=${MXBENCH_GPU_PACKAGE:-mxnet-cu112==1.9.1}
IMAGES=${MXBENCH_GPU_IMAGES:-12800}
TRAIN_TIMEOUT=${MXBENCH_GPU_TRAIN_TIMEOUT:-300}
BATCH=128  # the seed's 1-GPU variant, 1gpu-bs128 (plugins/mxbench/matrix/variants.py)
LAYERS=110

mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1  # everything shown is also kept under OUT

die() {  # exit-code message
  echo "gpu_check: $2" >&2
  exit "$1"
}

echo "== 1. GPU"
command -v nvidia-smi >/dev/null || die 2 "nvidia-smi not found: this check needs an NVIDIA driver"
if ! gpus=$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1); then
  die 2 "nvidia-smi --query-gpu=name,driver_version,compute_cap failed (an older driver lacks compute_cap): $gpus"
fi
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true  # the banner, for the record; the query above is what counts
cuda=$(sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' "$OUT/nvidia-smi.txt" | head -n1)
while IFS= read -r line; do echo "GPU: $line"; done <<<"$gpus"
IFS=, read -r gpu_name driver cc <<<"$(head -n1 <<<"$gpus")"
gpu_name=$(xargs <<<"$gpu_name") driver=$(xargs <<<"$driver") cc=$(xargs <<<"$cc")
[[ $cc =~ ^[0-9]+\.[0-9]+$ ]] || die 2 "nvidia-smi reports compute capability '$cc' for GPU 0, not MAJOR.MINOR"
echo "GPU 0: $gpu_name, driver $driver, CUDA ${cuda:-unknown} (the driver's), compute capability $cc (sm_${cc/./})"

echo "== 2. training venv"
if [[ -n ${MXBENCH_GPU_VENV:-} ]]; then
  venv=$MXBENCH_GPU_VENV
  [[ -x $venv/bin/python ]] || die 2 "MXBENCH_GPU_VENV=$venv has no bin/python"
  echo "using $venv as it is (MXBENCH_GPU_VENV): MXBENCH_GPU_PACKAGE is not installed"
else
  venv=.venv/gpu
  PYTHON=${MXBENCH_PYTHON:-$(command -v python3.11 || command -v python3 || true)}
  [[ -n $PYTHON ]] || die 2 "no python3 found: install Python 3.8-3.11 or set MXBENCH_PYTHON"
  # MXNet 1.9 needs numpy<1.24, which has no wheels for Python 3.12 and newer
  version=$("$PYTHON" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo "not a Python")
  [[ $version =~ ^3\.(8|9|10|11)\. ]] \
    || die 2 "$PYTHON is $version: MXNet 1.9's numpy<1.24 needs Python 3.8-3.11; set MXBENCH_PYTHON"
  "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null \
    || die 2 "$PYTHON has no venv module: install python3-venv (Debian/Ubuntu) or set MXBENCH_PYTHON"
  [[ $(grep -c '^mxnet==' requirements-train.txt) == 1 ]] \
    || die 2 "requirements-train.txt must have exactly one mxnet== line (the one $PACKAGE replaces)"
  stamp=$venv/.mxbench-stamp
  want=$({ echo "$PACKAGE"; cat requirements-train.txt tasks/pyproject.toml; } | sha256sum | cut -d' ' -f1)
  if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
    echo "reusing $venv ($PACKAGE, stamp matches)"
  else
    echo "creating $venv with $PACKAGE and requirements-train.txt's other pins"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    sed '/^mxnet==/d' requirements-train.txt >"$OUT/requirements-gpu.txt"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$OUT/requirements-gpu.txt" "$PACKAGE" -e tasks/
    echo "$want" >"$stamp"
  fi
fi
py=$venv/bin/python
# find_spec locates the package without importing it: importing loads libmxnet.so, which may not load here
lib=$("$py" -c 'import importlib.util, pathlib; spec = importlib.util.find_spec("mxnet")
print(pathlib.Path(spec.submodule_search_locations[0], "libmxnet.so") if spec else "")')
[[ -n $lib && -f $lib ]] || die 2 "no mxnet package with a libmxnet.so in $venv"
wheel=$("$py" -c 'from importlib.metadata import packages_distributions, version
names = packages_distributions().get("mxnet", [])
print(f"{names[0]}=={version(names[0])}" if names else "")' 2>/dev/null || true)
wheel=${wheel:-$PACKAGE}
echo "MXNet: $wheel ($lib)"

echo "== 3. GPU archs of libmxnet.so"
listing=
if command -v cuobjdump >/dev/null; then
  listing=$OUT/cuobjdump.txt
  # it also fails on a library without device code (a CPU build): that listing is an answer, any other failure not
  if ! cuobjdump --list-elf --list-ptx "$lib" >"$listing" 2>&1 \
    && ! grep -q 'does not contain device code' "$listing"; then
    echo "cuobjdump failed ($(head -n1 "$listing")): reading the ELF instead"
    listing=
  fi
fi
set +e
"$py" - "$lib" "$cc" "$wheel" "$listing" <<'PY'
"""Which archs libmxnet.so has kernels for, and whether one runs on this GPU; exit 3 when none does.

Without a cuobjdump listing this reads the ELF's .nv_fatbin section with mxbench_train.elf (stdlib only, imported
from tasks/ so that any venv can run it): the reading docker/README.md's table was cross-checked with; cuobjdump,
where present, is the reference.
"""
import re
import sys

sys.path.insert(0, "tasks")
from mxbench_train.elf import ElfError, fatbin_archs, names, section  # noqa: E402

STOCK_WHEEL_MAJORS = range(5, 9)  # the stock mxnet-cu* wheels carry cubins sm_50-sm_86 (docker/README.md)


lib, cc, wheel, listing = sys.argv[1:5]
major, minor = (int(x) for x in cc.split("."))
gpu = major * 10 + minor
if listing:
    text = open(listing).read()
    cubins = {int(a) for a in re.findall(r"^ELF file\s+\d+:\s+\S*?\.sm_(\d+)\w*\.cubin", text, re.M)}
    ptx = {int(a) for a in re.findall(r"^PTX file\s+\d+:\s+\S*?\.sm_(\d+)\w*\.ptx", text, re.M)}
    how = "cuobjdump --list-elf --list-ptx"
else:
    try:
        fatbin = section(lib, ".nv_fatbin")
    except ElfError as exc:
        sys.exit(f"gpu_check: {exc}")
    cubins, ptx, fatbins = fatbin_archs(fatbin)
    how = f"its .nv_fatbin section, {fatbins} fatbinaries" if fatbin else "its ELF section headers: no .nv_fatbin"


print(f"libmxnet.so (read from {how}): SASS {names(cubins)}; PTX {names(ptx, 'compute_')}")
# a cubin runs on GPUs of its major at its minor or above; PTX is compiled by the driver for any newer GPU
runnable = sorted(a for a in cubins if a // 10 == major and a <= gpu)
if runnable:
    print(f"sm_{gpu}: runs the sm_{runnable[-1]} cubins")
    sys.exit(0)
jit = sorted(a for a in ptx if a <= gpu)
if jit:
    print(f"sm_{gpu}: no cubin for it; the driver compiles the compute_{jit[-1]} PTX (a slow first start)")
    sys.exit(0)
if not cubins and not ptx:
    why = "has no CUDA kernels: a CPU build;"
else:
    why = f"has kernels for {names(cubins)} only, " + (f"PTX only for {names(ptx, 'compute_')}:" if ptx else "no PTX:")
fix = ("install a CUDA build, e.g. MXBENCH_GPU_PACKAGE=mxnet-cu112==1.9.1" if major in STOCK_WHEEL_MAJORS
       else "build from source with docker/train-source.Dockerfile")
print(f"gpu_check: the stock wheel {wheel} {why} it cannot run on this sm_{gpu} GPU; {fix}")
sys.exit(3)
PY
verdict=$?
set -e
[[ $verdict == 0 ]] || exit "$verdict"

# The wheels bundle no CUDA, cuDNN or NCCL (docker/README.md): say which are missing rather than fail at import
missing=$(ldd "$lib" | awk '/not found/ {print $1}' | paste -sd, -)
[[ -z $missing ]] || die 4 "libmxnet.so needs $missing, not found on this machine: install the CUDA 11 user-space \
libraries, cuDNN 8 and NCCL 2 (docker/train.Dockerfile's nvidia/cuda base has them) or put them on LD_LIBRARY_PATH"

echo "== 4. 1gpu-bs$BATCH: ResNet-$LAYERS, 2 epochs, $IMAGES SYNTHETIC images"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$py" -m mxbench_train synthetic-cifar10 --out "$scratch/source" --train "$IMAGES" --test $((IMAGES / 5)) >/dev/null
"$py" -m mxbench_train prepare-cifar10 --source "$scratch/source/cifar-10-batches-py" --out "$scratch/rec" \
  --allow-unverified >"$OUT/prepare.json"
train=$OUT/train
rm -rf "$train" && mkdir -p "$train"
# --log-dir: rank0.log, gpu-rank0.csv (the sampler) and gpu-topo.txt (nvidia-smi topo -m); stderr holds MXNet's
# C++ notices (the P2P one among them)
started=$SECONDS
if ! timeout "$TRAIN_TIMEOUT" "$py" -m mxbench_train train --gpus 0 --kv-store device --num-layers "$LAYERS" \
  --batch-size "$BATCH" --num-epochs 2 --disp-batches 20 --gpu-sample-ms 500 --log-dir "$train" \
  --data-train "$scratch/rec/cifar10_train.rec" --data-val "$scratch/rec/cifar10_val.rec" \
  >"$train/trainer.log" 2>&1; then
  tail -n 20 "$train/trainer.log"
  die 1 "training failed or ran past ${TRAIN_TIMEOUT}s (MXBENCH_GPU_TRAIN_TIMEOUT); the log is $train/trainer.log"
fi
echo "trained in $((SECONDS - started)) s"

"$py" - "$train" <<'PY'
"""Samples/s and s/epoch after the first epoch (warm-up), GPU use from the sampler's CSV, the topology."""
import re
import statistics
import sys
from pathlib import Path

from mxbench_train.telemetry import read_gpu_csv, summarise

train = Path(sys.argv[1])
log = (train / "rank0.log").read_text()
speeds = [float(s) for epoch, s in re.findall(r"Epoch\[(\d+)\] Batch \[(?:\d+-)?\d+\]\s+Speed: ([\d.]+) samples/sec",
                                             log) if int(epoch) >= 1]
costs = [float(c) for epoch, c in re.findall(r"Epoch\[(\d+)\] Time cost=([\d.]+)", log) if int(epoch) >= 1]
print(f"samples/s (epoch 1; Speedometer readings: {len(speeds)}): "
      + (f"mean {statistics.mean(speeds):.1f}, min {min(speeds):.1f}, max {max(speeds):.1f}" if speeds else "none"))
print(f"s/epoch (epoch 1): {costs[0] if costs else 'none'}")
gpu_csv = train / "gpu-rank0.csv"
for gpu in summarise(read_gpu_csv(gpu_csv)) if gpu_csv.exists() else []:
    print(f"GPU {gpu['index']} ({gpu['name']}, {gpu['samples']} samples): mean utilisation "
          f"{gpu['utilization_mean_pct']}%, peak memory {gpu['memory_used_max_mib']:.0f} MiB")
if not gpu_csv.exists():
    print("no GPU samples: see the run_end line of rank0.log for the sampler's reason")
trainer_log = (train / "trainer.log").read_text()
p2p = [line for line in trainer_log.splitlines() if "GPU pairs are enabled direct access" in line]
print("P2P notice: " + (p2p[0] if p2p else "none (MXNet prints one only when some GPU pairs lack P2P)"))
topology = train / "gpu-topo.txt"
print("topology (nvidia-smi topo -m):\n" + (topology.read_text().rstrip() if topology.exists() else "not captured"))
PY
echo "gpu_check: done in $SECONDS s; results under $OUT"
