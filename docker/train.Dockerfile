# The training image: what runs on GPU nodes (Kubernetes pods) and what GPU hosts mirror in a venv.
# Same pins as requirements-train.txt, with a CUDA build of MXNet in place of the CPU one.
# Stock mxnet-cu* wheels carry GPU code up to sm_86 (Ampere): they do not run on Hopper (sm_90).
#   docker build -f docker/train.Dockerfile -t mxbench-train:cu112 .
ARG CUDA_IMAGE=nvidia/cuda:11.2.2-cudnn8-runtime-ubuntu20.04
FROM ${CUDA_IMAGE}
ARG MXNET_PACKAGE=mxnet-cu112==1.9.1
ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-pip python3-venv libgomp1 \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/train
COPY requirements-train.txt /tmp/requirements-train.txt
# every pin of requirements-train.txt but mxnet itself, then the CUDA build
RUN grep -v '^mxnet==' /tmp/requirements-train.txt > /tmp/requirements-gpu.txt \
 && /opt/train/bin/pip install --no-cache-dir -r /tmp/requirements-gpu.txt "${MXNET_PACKAGE}"
COPY tasks /opt/mxbench/tasks
RUN /opt/train/bin/pip install --no-cache-dir --no-deps /opt/mxbench/tasks
ENV PATH=/opt/train/bin:$PATH
# The launcher gives each role its argv (python -m mxbench_train train|serve ...) and DMLC_* env.
ENTRYPOINT []
CMD ["python", "-m", "mxbench_train"]
