"""The trainer's part of a run's folder, named once for both sides: the trainer writes these files
(``plan_runner``, ``train``) and the orchestration side reads them (``mxbench.run_folder.RunFolder``).
Standard library only: hosts and the Airflow side import it as well as the training venv."""
from pathlib import Path

ROLES = "roles"  # one log per role, roles/<role>.log (plan_runner.run_plan)
PIDS = "pids.json"  # the local plan's processes, for reap
WORKER_LOGS = "rank*.log"  # each worker's own log, rank<r>.log
GPU_TELEMETRY = "gpu-rank*.csv"  # each worker's GPU samples, gpu-rank<r>.csv
GPU_TOPOLOGY = "gpu-topo.txt"  # rank 0's nvidia-smi topo -m


def role_log(folder, role: str) -> Path:
    return Path(folder) / ROLES / f"{role}.log"


def worker_log(folder, rank: int) -> Path:
    return Path(folder) / WORKER_LOGS.replace("*", str(rank))


def gpu_telemetry(folder, rank: int) -> Path:
    return Path(folder) / GPU_TELEMETRY.replace("*", str(rank))
