# The training image with MXNet built from source at one commit: for a commit that has no wheel,
# or for GPUs the stock wheels lack (Hopper, sm_90: CUDA >= 11.8 and MXNET_CUDA_ARCH with 9.0;
# untested here). Same venv layout, same requirements-train.txt pins, same trainer as train.Dockerfile.
#   docker build -f docker/train-source.Dockerfile --build-arg MXNET_COMMIT=<sha, tag or branch> \
#     -t mxbench-train:src-<sha> .
# MXNET_COMMIT is required; it is fetched from apache/mxnet (a 1.x commit: the trainer uses the Module API).

# CUDA toolkit + cuDNN 8 for the compile (devel) and at run time (runtime).
ARG CUDA_VERSION=11.2.2
FROM ghcr.io/astral-sh/uv:0.13.8 AS uv

FROM nvidia/cuda:${CUDA_VERSION}-cudnn8-devel-ubuntu20.04 AS build
ARG MXNET_COMMIT
# Compute capabilities to compile for: Volta, Turing, Ampere (A100, A10/RTX 30xx). Add 9.0 for
# Hopper, which needs CUDA_VERSION >= 11.8.
ARG MXNET_CUDA_ARCH="7.0;7.5;8.0;8.6"
ARG BUILD_JOBS=8
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential ca-certificates cmake git ninja-build \
      libopenblas-dev liblapack-dev libopencv-dev libzmq3-dev libprotobuf-dev protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
# Only that commit (GitHub serves any reachable sha), then its submodules (ps-lite, dmlc-core, ...).
WORKDIR /src/mxnet
RUN test -n "${MXNET_COMMIT}" || { echo "error: --build-arg MXNET_COMMIT=<commit> is required" >&2; exit 1; } \
 && git init -q . \
 && git remote add origin https://github.com/apache/mxnet.git \
 && git fetch -q --depth 1 origin "${MXNET_COMMIT}" \
 && git checkout -q FETCH_HEAD \
 && git submodule update -q --init --recursive
# dist kvstore (ps-lite) for dist_sync; OpenCV for ImageRecordIter; jemalloc off (one less runtime lib).
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DUSE_CUDA=ON -DUSE_CUDNN=ON -DUSE_DIST_KVSTORE=ON -DMXNET_CUDA_ARCH="${MXNET_CUDA_ARCH}" \
      -DUSE_OPENCV=ON -DUSE_BLAS=Open -DUSE_LAPACK=ON -DUSE_JEMALLOC=OFF \
      -DUSE_CPP_PACKAGE=OFF -DBUILD_CPP_EXAMPLES=OFF \
 && cmake --build build --parallel "${BUILD_JOBS}"

FROM nvidia/cuda:${CUDA_VERSION}-cudnn8-runtime-ubuntu20.04
ARG CUDA_VERSION
# Same minor version as the repo's environments (tests check it).
ARG PYTHON_VERSION=3.11
ARG MXNET_COMMIT
ARG MXNET_CUDA_ARCH="7.0;7.5;8.0;8.6"

LABEL org.opencontainers.image.title="mxbench-train" \
      org.opencontainers.image.description="mxbench trainer (mxbench_train) with MXNet built from source" \
      org.opencontainers.image.base.name="nvidia/cuda:${CUDA_VERSION}-cudnn8-runtime-ubuntu20.04" \
      org.mxbench.mxnet.package="mxnet (source build, CUDA ${CUDA_VERSION}, arch ${MXNET_CUDA_ARCH})" \
      org.mxbench.mxnet.version="source" \
      org.mxbench.mxnet.commit="${MXNET_COMMIT}"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# MXBENCH_MXNET_COMMIT: the trainer reports it (a source build's version names no commit); a run of a
# commit's build is kept only when its trainer names that commit
ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 MXBENCH_MXNET_COMMIT=${MXNET_COMMIT} \
    UV_PYTHON_INSTALL_DIR=/opt/python UV_PYTHON_PREFERENCE=only-managed UV_NO_CACHE=1
# The run-time halves of the build stage's -dev packages (Ubuntu 20.04 names); the ldd check
# below fails the build if libmxnet.so needs one more.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libgomp1 libopenblas0 liblapack3 \
      libopencv-core4.2 libopencv-imgproc4.2 libopencv-imgcodecs4.2 libopencv-highgui4.2 \
      libzmq5 libprotobuf17 \
 && rm -rf /var/lib/apt/lists/*

# The same Python and venv layout as train.Dockerfile.
COPY --from=uv /uv /usr/local/bin/uv
RUN uv python install "${PYTHON_VERSION}" \
 && uv venv --seed --python "${PYTHON_VERSION}" /opt/train
ENV VIRTUAL_ENV=/opt/train PATH=/opt/train/bin:$PATH

# Every pin of requirements-train.txt but mxnet itself, which comes from the build stage.
COPY requirements-train.txt /tmp/requirements-train.txt
RUN test "$(grep -c '^mxnet==' /tmp/requirements-train.txt)" = 1 \
 && sed -e '/^mxnet==/d' /tmp/requirements-train.txt > /tmp/requirements-gpu.txt \
 && /opt/train/bin/pip install --no-cache-dir -r /tmp/requirements-gpu.txt \
 && rm /tmp/requirements-train.txt /tmp/requirements-gpu.txt

# The mxnet package laid out as the wheel lays it out: python/mxnet with libmxnet.so inside (where
# libinfo.find_lib_path looks first) and tools/im2rec.py (python -m mxnet.tools.im2rec, which
# prepare-cifar10 runs).
COPY --from=build /src/mxnet/python/mxnet /opt/train/lib/python${PYTHON_VERSION}/site-packages/mxnet
COPY --from=build /src/mxnet/build/libmxnet.so /opt/train/lib/python${PYTHON_VERSION}/site-packages/mxnet/
COPY --from=build /src/mxnet/tools/im2rec.py /opt/train/lib/python${PYTHON_VERSION}/site-packages/mxnet/tools/
# A missing run-time library fails the build, not the first pod. libcuda.so.1 is the exception:
# the NVIDIA container runtime mounts it from the host driver when a pod starts.
RUN missing="$(ldd /opt/train/lib/python${PYTHON_VERSION}/site-packages/mxnet/libmxnet.so \
      | grep 'not found' | grep -v 'libcuda\.so' || true)" \
 && if [ -n "${missing}" ]; then echo "libmxnet.so lacks: ${missing}" >&2; exit 1; fi

# The trainer, installed (not editable): the source copy is removed.
COPY tasks /tmp/tasks
RUN /opt/train/bin/pip install --no-cache-dir --no-deps /tmp/tasks \
 && rm -rf /tmp/tasks

# Roles need no root. A numeric USER lets Kubernetes' runAsNonRoot verify it.
# /dev/shm (MXNet's shared memory) comes from the pod spec (an emptyDir), not the image.
RUN useradd --no-log-init --create-home --uid 1000 --user-group --shell /bin/bash mxbench
USER 1000:1000
WORKDIR /home/mxbench

# The launcher gives each role its argv (python -m mxbench_train train|serve ...) and DMLC_* env:
# "python" is the venv's through PATH.
ENTRYPOINT []
CMD ["python", "-m", "mxbench_train", "--help"]
