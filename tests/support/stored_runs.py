"""Seeded DAG-run folders and store fixtures, shared by the store's, the report's and the UI's tests."""
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from alembic import command

from mxbench import store
from mxbench.matrix.variants import measured_setup
from mxbench.run_folder import DagRunFolder

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
CPU_BOX = {"python": "3.11.9", "host": "box-1", "cpu_model": "AMD EPYC 7B13", "cpu_count": 2,
           "gpu": {"available": False, "reason": "nvidia-smi not found"}, "mxnet_version": "1.9.1"}
OTHER_CPU_BOX = {**CPU_BOX, "host": "box-2", "cpu_model": "Intel Xeon 8375C", "cpu_count": 8}
GPU_BOX = {**CPU_BOX, "gpu": {"available": True, "driver": "535.104", "cuda": "12.2",
                              "gpus": [{"index": i, "name": "Tesla V100-SXM2-16GB"} for i in range(8)]}}
CPU_FP = store.fingerprint(CPU_BOX)[0]
HEAD = "0011"  # the newest migration
OTHER_FP = store.fingerprint(OTHER_CPU_BOX)[0]


FOLDER_PARAMS = {"preset": "cpu-demo", "repeats": 2}  # request.json's params of a seeded folder


def variant(id="cpu2-bs32", workers=2, batch_size=32):
    return {"id": id, "setup": f"1 host x {workers} workers dist_sync (CPU)", "batch_size": batch_size,
            "workers": workers, "hosts": 1, "gpus_per_worker": 0, "kvstore": "dist_sync", "num_layers": 8,
            "epochs": 3, "disp_batches": 5, "host_network": False, "launchers": []}


def make_dag_dir(root: Path, name: str, runs, started=T0, environment=CPU_BOX, unparsed=(), run_id=None, ran=None,
                 params=None, contended=None):
    """A DAG run folder as join_results leaves it. ``runs``: (variant dict, launcher, repeat,
    status, samples/s or None, cause); keys in ``unparsed`` are in request.json but not runs.csv.
    ``ran``: launcher -> the runs.csv columns saying what its runs ran on (``mxnet_asked``,
    ``mxnet_reported``, ``runtime``); None: a folder from before those columns. ``params``: request.json's
    (default ``FOLDER_PARAMS``). ``contended``: the repeats whose runs had other work on their hosts
    (runs.csv's ``contended``, as parse_logs writes it); None: a folder from before that column."""
    dag_dir = root / name
    dag_dir.mkdir(parents=True)
    request_runs, rows = [], []
    for i, (v, launcher, repeat, status, speed, cause) in enumerate(runs):
        key = f"{v['id']}__{launcher}__r{repeat}"
        request_runs.append({"key": key, "variant": v, "launcher": launcher, "repeat": repeat})
        if key in unparsed:
            continue
        start = started.timestamp() + 60 * i
        rows.append({"key": key, "variant": v["id"], "setup": v["setup"], "launcher": launcher, "repeat": repeat,
                     "num_layers": v["num_layers"], "devices": v["workers"], "workers": v["workers"],
                     "batch_size": v["batch_size"], "batch_per_device": v["batch_size"], "status": status,
                     "cause": cause, "samples_per_sec": speed, "epoch_samples_per_sec": speed and speed * 0.98,
                     "sec_per_epoch": speed and 3000 / speed, "first_epoch_s": None, "warmup_excluded": True,
                     "validation_accuracy": 0.1 if speed else None, "gpu_util_pct": None, "gpu_mem_mib": None,
                     "p2p_pairs": None, "started_at": start, "ended_at": start + 50, "duration_s": 50.0,
                     "trainer_wall_s": 45.0, "reused": False, "warnings": None, **(ran or {}).get(launcher, {}),
                     **({} if contended is None else {
                         "contended": repeat in contended,
                         "contention": "other processes used 0.90 cores" if repeat in contended else None})})
        (dag_dir / key).mkdir()
        if status == "ok":
            (dag_dir / key / "metrics.json").write_text(json.dumps(
                {"samples_per_sec": speed, "environment": environment}))
    request = {"params": dict(params or FOLDER_PARAMS), "runs": request_runs,
               "machine_sets": {"local": ["local", "ssh"]}}
    if run_id:
        request["run_id"] = run_id
    (dag_dir / "request.json").write_text(json.dumps(request))
    (dag_dir / "tables").mkdir()
    pd.DataFrame(rows).to_csv(dag_dir / "tables" / "runs.csv", index=False)
    return dag_dir


def setup_of(v=None, params=None) -> str:
    """What runs of ``v`` (default ``variant()``) in a folder of ``params`` measured: their ``setup_key``."""
    return measured_setup(v or variant(), params or FOLDER_PARAMS)


SETUP = setup_of()  # the default variant's, in a default folder


def ok_runs(v=None, launchers=("local",), speeds=(100.0, 102.0)):
    return [(v or variant(), launcher, r, "ok", speed, None)
            for launcher in launchers for r, speed in enumerate(speeds, 1)]


VENV_190 = "/opt/mxbench/builds/mxnet-1.9.0/bin/python"
IMAGE_190 = "registry.example/mxbench-train:1.9.0"


def upgrade_to(url, revision):
    with store.engine(url).begin() as connection:
        command.upgrade(store.alembic_config(connection), revision)


# A planted step time (seconds) for the 1-, 2- and 4-worker CPU variants: compute + device link x (m-1)/m
# (``results.scaling_model``'s first two terms; dist_sync on one host carries no network term)
PLANTED_STEP = {"compute": 0.5, "device link": 0.2}
SCALING_WORKERS = (1, 2, 4)


def planted_speed(workers, batch=32, compute=0.5, link=0.2):
    """The samples/s ``workers`` CPU workers at ``batch`` images each reach under the planted model."""
    return workers * batch / (compute + link * (workers - 1) / workers)


def record_scaling_series(url, root: Path, dag_runs=4, noise=0.02, seed=0, environment=CPU_BOX, first=0,
                          link=0.2, ran=None, dag_id="mxbench_benchmark", repeats=2):
    """Record ``dag_runs`` DAG runs (a day apart from ``T0`` + ``first`` days) of 1-, 2- and 4-worker
    variants on ``local``, ``repeats`` each, at the planted speeds times lognormal ``noise``."""
    rng = np.random.default_rng(seed)
    for day in range(first, first + dag_runs):
        runs = [(variant(f"cpu{w}-bs32", workers=w), "local", r, "ok",
                 float(planted_speed(w, link=link) * np.exp(rng.normal(0, noise))), None)
                for w in SCALING_WORKERS for r in range(1, repeats + 1)]
        name = f"scaling-{environment['host']}-{day}"
        folder = make_dag_dir(root, name, runs, started=T0 + timedelta(days=day), environment=environment, ran=ran)
        store.record_dag_run(url, DagRunFolder(folder), dag_id=dag_id, run_id=name, trigger="manual")
