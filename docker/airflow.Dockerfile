# The Airflow image: scheduler, API server, workers. Airflow's environment never has mxnet
# (MXNet 1.9 needs numpy<1.24, Airflow 3 with pandas 3 needs numpy 2); a worker's training
# environment is a venv of its own (/opt/airflow/train: data preparation with im2rec, local runs
# on CPU). GPU training runs in the training image (train.Dockerfile) or on SSH hosts.
#   docker build -f docker/airflow.Dockerfile -t mxbench-airflow:3.3.2 .
# The tag is the apache-airflow pin of requirements.txt (tests check it), Python as the repo's (3.11).
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

# As the image's airflow user (the official image wants pip run as it), apache-airflow repeated
# so that pip can never swap the base image's Airflow for another version.
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
