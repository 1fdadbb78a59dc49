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

# mxbench and mxbench_train as wheels built from the source (installed, not editable; the source is not kept).
# The UI plugin registers itself (airflow.plugins entry point): no plugins folder. The DAG files ship in
# the package and are copied into the chart's dags folder.
COPY --chown=airflow:root pyproject.toml setup.py MANIFEST.in requirements-train.txt /tmp/mxbench-src/
COPY --chown=airflow:root plugins /tmp/mxbench-src/plugins
COPY --chown=airflow:root standins /tmp/mxbench-src/standins
COPY --chown=airflow:root dags /tmp/mxbench-src/dags
COPY --chown=airflow:root config /tmp/mxbench-src/config
COPY --chown=airflow:root tasks /tmp/mxbench-src/tasks
RUN pip wheel --no-cache-dir --no-deps -w /tmp/wheels /tmp/mxbench-src /tmp/mxbench-src/tasks \
 && pip install --no-cache-dir --no-deps /tmp/wheels/mxbench-*.whl /tmp/wheels/mxbench_train-*.whl \
 && mkdir -p /opt/airflow/dags "${MXBENCH_HOME}" \
 && cp "$(mxbench dags-folder)"/*.py /opt/airflow/dags/ \
 && rm -rf /tmp/mxbench-src

# The training environment, beside Airflow's and never mixed with it: prepare_data runs MXNet's
# im2rec there, and the local launcher trains with it (requirements-train.txt's pins, CPU MXNet).
COPY --chown=airflow:root requirements-train.txt /tmp/requirements-train.txt
RUN python -m venv /opt/airflow/train \
 && /opt/airflow/train/bin/pip install --no-cache-dir -r /tmp/requirements-train.txt /tmp/wheels/mxbench_train-*.whl \
 && rm -rf /tmp/wheels
ENV MXBENCH_TRAIN_PYTHON=/opt/airflow/train/bin/python

# The image checks itself: MXNet imports in the training venv, and im2rec packs a few generated
# images along prepare_data's own path (synthetic-cifar10, then prepare-cifar10). A library missing
# from the image fails this build, not a DAG run.
RUN /opt/airflow/train/bin/python -m mxbench_train mxnet-check --features OPENMP,OPENCV \
 && /opt/airflow/train/bin/python -m mxbench_train synthetic-cifar10 --out /tmp/selfcheck/source --train 10 --test 5 \
 && /opt/airflow/train/bin/python -m mxbench_train prepare-cifar10 --source /tmp/selfcheck/source/cifar-10-batches-py \
      --out /tmp/selfcheck/rec --allow-unverified --threads 1 \
 && rm -rf /tmp/selfcheck
