# The training image: what runs on GPU nodes (Kubernetes role pods) and what GPU hosts mirror in a venv.
# Every pin of requirements-train.txt, with the stock CUDA wheel of MXNet in place of the CPU one.
# Stock mxnet-cu* 1.9.1 wheels carry GPU code up to sm_86: Hopper (sm_90) needs train-source.Dockerfile.
#   docker build -f docker/train.Dockerfile -t mxbench-train:1.9.1-cu112 .
#   docker build -f docker/train.Dockerfile --build-arg MXNET_VERSION=1.8.0.post0 -t mxbench-train:1.8.0.post0-cu112 .

# mxnet-cu112 is built against CUDA 11.2 and cuDNN 8: the base image must match the wheel.
ARG CUDA_IMAGE=nvidia/cuda:11.2.2-cudnn8-runtime-ubuntu20.04
# Pinned uv: it supplies the Python below (Ubuntu 20.04 only has 3.8).
FROM ghcr.io/astral-sh/uv:0.13.8 AS uv

FROM ${CUDA_IMAGE}
ARG CUDA_IMAGE
# Same minor version as the repo's environments (tests check it).
ARG PYTHON_VERSION=3.11
ARG MXNET_PACKAGE=mxnet-cu112
# Default: the mxnet pin of requirements-train.txt (tests check it); one image per version for backfills.
ARG MXNET_VERSION=1.9.1

LABEL org.opencontainers.image.title="mxbench-train" \
      org.opencontainers.image.description="mxbench trainer (mxbench_train) with a stock MXNet CUDA wheel" \
      org.opencontainers.image.base.name="${CUDA_IMAGE}" \
      org.mxbench.mxnet.package="${MXNET_PACKAGE}" \
      org.mxbench.mxnet.version="${MXNET_VERSION}" \
      org.mxbench.mxnet.commit="release wheel"

ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 \
    UV_PYTHON_INSTALL_DIR=/opt/python UV_PYTHON_PREFERENCE=only-managed UV_NO_CACHE=1
# What the wheel's libmxnet.so and the libgfortran.so.3 it bundles link beyond the base image:
# libgomp1 (OpenMP), libquadmath0 (tests/orchestration/test_docker_images.py reads the wheel's ELF).
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libgomp1 libquadmath0 \
 && rm -rf /var/lib/apt/lists/*

# A standalone CPython under /opt/python (readable by every user) and the venv /opt/train on top of it.
COPY --from=uv /uv /usr/local/bin/uv
RUN uv python install "${PYTHON_VERSION}" \
 && uv venv --seed --python "${PYTHON_VERSION}" /opt/train
ENV VIRTUAL_ENV=/opt/train PATH=/opt/train/bin:$PATH

# Every pin of requirements-train.txt but the mxnet line, plus the CUDA build of that MXNet version.
# The count check fails the build if the mxnet line changed shape (else CPU mxnet would sneak in).
COPY requirements-train.txt /tmp/requirements-train.txt
RUN test "$(grep -c '^mxnet==' /tmp/requirements-train.txt)" = 1 \
 && sed -e '/^mxnet==/d' /tmp/requirements-train.txt > /tmp/requirements-gpu.txt \
 && /opt/train/bin/pip install --no-cache-dir -r /tmp/requirements-gpu.txt "${MXNET_PACKAGE}==${MXNET_VERSION}" \
 && rm /tmp/requirements-train.txt /tmp/requirements-gpu.txt

# The trainer, installed (not editable): the source copy is removed.
# Then the image checks itself: mxnet imports with CUDA, cuDNN, NCCL and the dist kvstore, and the
# GPU archs of its kernels are listed (the build log says which GPUs this image runs on).
# libcuda.so.1 comes from the host's driver when a pod starts; for this check the base image's CUDA
# forward-compatibility copy (/usr/local/cuda/compat) stands in: it loads, nothing runs on a GPU.
COPY tasks /tmp/tasks
RUN /opt/train/bin/pip install --no-cache-dir --no-deps /tmp/tasks \
 && rm -rf /tmp/tasks \
 && LD_LIBRARY_PATH=/usr/local/cuda/compat python -m mxbench_train mxnet-check \
      --features CUDA,CUDNN,NCCL,DIST_KVSTORE,OPENCV,OPENMP

# Roles need no root. A numeric USER lets Kubernetes' runAsNonRoot verify it.
# /dev/shm (MXNet's shared memory) comes from the pod spec (an emptyDir), not the image.
RUN useradd --no-log-init --create-home --uid 1000 --user-group --shell /bin/bash mxbench
USER 1000:1000
WORKDIR /home/mxbench

# The launcher gives each role its argv (python -m mxbench_train train|serve ...) and DMLC_* env:
# "python" is the venv's through PATH.
ENTRYPOINT []
CMD ["python", "-m", "mxbench_train", "--help"]
