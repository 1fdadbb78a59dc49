# The Airflow image: scheduler, API server, workers. Airflow's environment never has mxnet
# (MXNet 1.9 needs numpy<1.24, Airflow 3 with pandas 3 needs numpy 2); a worker's training
# environment is a venv of its own (/opt/airflow/train: data preparation with im2rec, local runs
# on CPU). GPU training runs in the training image (train.Dockerfile) or on SSH hosts.
#   docker build -f docker/airflow.Dockerfile -t mxbench-airflow:3.3.2-$(git rev-parse --short HEAD) .
# One tag per build (the Airflow version, then the commit): a node never runs an older image cached
# under the same tag (docs/deploy.md). The base tag is the apache-airflow pin of requirements.txt
# (tests check it), Python as the repo's (3.11).
FROM apache/airflow:3.3.2-python3.11

# Optional: the constraints file of this Airflow version, e.g.
# https://raw.githubusercontent.com/apache/airflow/constraints-3.3.2/constraints-3.11.txt
# Off by default: requirements.txt's own pins win, and may differ from the constraints.
ARG AIRFLOW_CONSTRAINTS=""
# Runs' folders (data, run logs, reports): mount a volume here.
ENV MXBENCH_HOME=/opt/airflow/mxbench
# The scheduler sees a freed pool slot at its next loop, sleeping this long while idle (1 s by
# default): 0.5 s keeps the gap between two runs of one pool under 1 s (benchmarks/harness_overhead.py)
ENV AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME=0.5

# The training venv's MXNet wheel links the system's OpenMP and quad-math runtimes (libmxnet.so needs
# libgomp.so.1; the libgfortran.so.3 it bundles needs libquadmath.so.0): the official image has
# neither. tests/orchestration/test_docker_images.py checks this list against the wheel's ELF headers.
USER 0
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 libquadmath0 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
# back to the image's airflow user (uid 50000, as the chart runs it)
USER 50000

# As the image's airflow user (the official image wants pip run as it), apache-airflow repeated
# so that pip can never swap the base image's Airflow for another version. requirements.txt holds
# the runtime pins only (the test and lint tools are in requirements-dev.txt, not in the image).
COPY --chown=airflow:root requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir ${AIRFLOW_CONSTRAINTS:+--constraint "${AIRFLOW_CONSTRAINTS}"} \
      "apache-airflow==${AIRFLOW_VERSION}" -r /tmp/requirements.txt

# The AIRFLOW_HOME layout: dags/ and plugins/ where Airflow looks; pyproject.toml at /opt/airflow
# maps the mxbench package to plugins/mxbench, as in the repo (and lists the standins package:
# it must be there for the editable install, though the image runs none of the stand-ins).
COPY --chown=airflow:root pyproject.toml /opt/airflow/pyproject.toml
COPY --chown=airflow:root plugins /opt/airflow/plugins
COPY --chown=airflow:root standins /opt/airflow/standins
COPY --chown=airflow:root dags /opt/airflow/dags
COPY --chown=airflow:root tasks /opt/airflow/tasks
# mxbench_train (the pure role plan; no mxnet): installed, not editable.
# mxbench: editable, i.e. the plugins/mxbench folder itself, so that `import mxbench` and the
# `mxbench` command run exactly the code Airflow loads as plugins (one copy, not two).
RUN pip install --no-cache-dir --no-deps /opt/airflow/tasks \
 && pip install --no-cache-dir --no-deps --editable /opt/airflow \
 && mkdir -p "${MXBENCH_HOME}"

# The training environment, beside Airflow's and never mixed with it: prepare_data runs MXNet's
# im2rec there, and the local launcher trains with it (requirements-train.txt's pins, CPU MXNet).
COPY --chown=airflow:root requirements-train.txt /tmp/requirements-train.txt
RUN python -m venv /opt/airflow/train \
 && /opt/airflow/train/bin/pip install --no-cache-dir -r /tmp/requirements-train.txt /opt/airflow/tasks
ENV MXBENCH_TRAIN_PYTHON=/opt/airflow/train/bin/python

# The image checks itself: MXNet imports in the training venv, and im2rec packs a few generated
# images along prepare_data's own path (synthetic-cifar10, then prepare-cifar10). A library missing
# from the image fails this build, not a DAG run.
RUN /opt/airflow/train/bin/python -m mxbench_train mxnet-check --features OPENMP,OPENCV \
 && /opt/airflow/train/bin/python -m mxbench_train synthetic-cifar10 --out /tmp/selfcheck/source --train 10 --test 5 \
 && /opt/airflow/train/bin/python -m mxbench_train prepare-cifar10 --source /tmp/selfcheck/source/cifar-10-batches-py \
      --out /tmp/selfcheck/rec --allow-unverified --threads 1 \
 && rm -rf /tmp/selfcheck
