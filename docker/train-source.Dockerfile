# The training image with MXNet built from source at one commit: for a commit that has no wheel,
# and the one way to run MXNet on GPUs the stock wheels have no kernels for (Hopper, sm_90, and
# newer through the sm_90 PTX). Same venv layout, same requirements-train.txt pins, same trainer
# as train.Dockerfile.
#   docker build -f docker/train-source.Dockerfile --build-arg MXNET_COMMIT=<sha, tag or branch> \
#     -t mxbench-train:src-<sha> .
# MXNET_COMMIT is required; it is fetched from apache/mxnet (a 1.x commit: the trainer uses the Module API).
# The build fails when the library lacks an arch of MXNET_CUDA_ARCH, NCCL, or a library it links;
# its log (and the label org.mxbench.mxnet.cuda_archs) says which archs the image has.

# CUDA toolkit + cuDNN 8 for the compile (devel) and at run time (runtime). 11.8 is the first CUDA
# whose nvcc compiles for sm_90, and the last 11.x (MXNet 1.9 builds with CUDA 11).
ARG CUDA_VERSION=11.8.0
FROM ghcr.io/astral-sh/uv:0.13.8 AS uv

FROM nvidia/cuda:${CUDA_VERSION}-cudnn8-devel-ubuntu20.04 AS build
ARG CUDA_VERSION
ARG MXNET_COMMIT
# Compute capabilities to compile for, as MXNet's MXNET_CUDA_ARCH: Volta, Turing, Ampere (A100,
# A10/RTX 30xx; Ada through 8.6), Hopper (H100, H200), and the sm_90 PTX, which the driver compiles
# for newer GPUs at first start. Numbers only; each must be one this CUDA's nvcc knows.
ARG MXNET_CUDA_ARCH="7.0;7.5;8.0;8.6;9.0+PTX"
ARG BUILD_JOBS=8
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
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
# An arch this nvcc cannot compile for fails here, before an hour of compiling (sm_90 needs CUDA >= 11.8).
RUN known="$(nvcc --list-gpu-code | tr '\n' ' ')" \
 && for arch in $(echo "${MXNET_CUDA_ARCH}" | tr ';' ' '); do \
      code="sm_$(echo "${arch}" | sed -e 's/+PTX$//' -e 's/(.*//' -e 's/\.//')"; \
      case " ${known} " in *" ${code} "*) ;; \
        *) echo "error: CUDA ${CUDA_VERSION} cannot compile ${arch} of MXNET_CUDA_ARCH (its nvcc knows: ${known})" >&2; exit 1 ;; \
      esac; \
    done
# dist kvstore (ps-lite) for dist_sync; NCCL for the multi-GPU device kvstore (the stock wheels have
# it; the base image has libnccl-dev); OpenCV for ImageRecordIter; jemalloc off (one less runtime
# lib). A Release build compiles and links MXNet's bundled LLVM OpenMP (3rdparty/openmp, libomp.so):
# MXNet 1.9's CMakeLists uses it on x86_64 in every build type but "Distribution".
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DUSE_CUDA=ON -DUSE_CUDNN=ON -DUSE_NCCL=ON -DUSE_DIST_KVSTORE=ON -DMXNET_CUDA_ARCH="${MXNET_CUDA_ARCH}" \
      -DUSE_OPENCV=ON -DUSE_BLAS=Open -DUSE_LAPACK=ON -DUSE_JEMALLOC=OFF \
      -DUSE_CPP_PACKAGE=OFF -DBUILD_CPP_EXAMPLES=OFF \
 && cmake --build build --parallel "${BUILD_JOBS}"
# What the runtime stage takes: libmxnet.so, and every library it links that the build made
# (libomp.so among them); CMake's USE_NCCL only warns when it finds no NCCL, so check it linked.
RUN mkdir -p /out/lib \
 && cp build/libmxnet.so /out/ \
 && needed="$(readelf -d build/libmxnet.so | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')" \
 && { echo "${needed}" | grep -q '^libnccl\.so' || { echo "error: libmxnet.so was built without NCCL" >&2; exit 1; }; } \
 && for lib in ${needed}; do \
      made="$(find build -name "${lib}" -print -quit)"; \
      if [ -n "${made}" ]; then cp -L "${made}" /out/lib/; fi; \
    done \
 && { ls /out/lib/libomp.so* >/dev/null 2>&1 || { echo "error: the build made no libomp.so for libmxnet.so" >&2; exit 1; }; }

FROM nvidia/cuda:${CUDA_VERSION}-cudnn8-runtime-ubuntu20.04
ARG CUDA_VERSION
# Same minor version as the repo's environments (tests check it).
ARG PYTHON_VERSION=3.11
ARG MXNET_COMMIT
ARG MXNET_CUDA_ARCH="7.0;7.5;8.0;8.6;9.0+PTX"

LABEL org.opencontainers.image.title="mxbench-train" \
      org.opencontainers.image.description="mxbench trainer (mxbench_train) with MXNet built from source" \
      org.opencontainers.image.base.name="nvidia/cuda:${CUDA_VERSION}-cudnn8-runtime-ubuntu20.04" \
      org.mxbench.mxnet.package="mxnet (source build, CUDA ${CUDA_VERSION}, arch ${MXNET_CUDA_ARCH})" \
      org.mxbench.mxnet.version="source" \
      org.mxbench.mxnet.commit="${MXNET_COMMIT}" \
      org.mxbench.mxnet.cuda_archs="${MXNET_CUDA_ARCH}"

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
COPY --from=build /out/libmxnet.so /opt/train/lib/python${PYTHON_VERSION}/site-packages/mxnet/
# The libraries the build made for it (MXNet's OpenMP, libomp.so), where the loader finds them.
COPY --from=build /out/lib/ /usr/local/lib/
RUN ldconfig
COPY --from=build /src/mxnet/tools/im2rec.py /opt/train/lib/python${PYTHON_VERSION}/site-packages/mxnet/tools/
# A missing run-time library fails the build, not the first pod. libcuda.so.1 is the exception:
# the NVIDIA container runtime mounts it from the host driver when a pod starts.
RUN missing="$(ldd /opt/train/lib/python${PYTHON_VERSION}/site-packages/mxnet/libmxnet.so \
      | grep 'not found' | grep -v 'libcuda\.so' || true)" \
 && if [ -n "${missing}" ]; then echo "libmxnet.so lacks: ${missing}" >&2; exit 1; fi

# The trainer, installed (not editable): the source copy is removed.
# Then the image checks itself: mxnet imports with CUDA, cuDNN, NCCL, the dist kvstore and OpenMP,
# and has kernels for every arch of MXNET_CUDA_ARCH (the log lists them). libcuda.so.1 comes from
# the host's driver when a pod starts; for this check the base image's CUDA forward-compatibility
# copy (/usr/local/cuda/compat) stands in: it loads, nothing runs on a GPU.
COPY tasks /tmp/tasks
RUN /opt/train/bin/pip install --no-cache-dir --no-deps /tmp/tasks \
 && rm -rf /tmp/tasks \
 && LD_LIBRARY_PATH=/usr/local/cuda/compat python -m mxbench_train mxnet-check \
      --features CUDA,CUDNN,NCCL,DIST_KVSTORE,OPENCV,OPENMP --archs "${MXNET_CUDA_ARCH}"

# Roles need no root. A numeric USER lets Kubernetes' runAsNonRoot verify it.
# /dev/shm (MXNet's shared memory) comes from the pod spec (an emptyDir), not the image.
RUN useradd --no-log-init --create-home --uid 1000 --user-group --shell /bin/bash mxbench
USER 1000:1000
WORKDIR /home/mxbench

# The launcher gives each role its argv (python -m mxbench_train train|serve ...) and DMLC_* env:
# "python" is the venv's through PATH.
ENTRYPOINT []
CMD ["python", "-m", "mxbench_train", "--help"]
