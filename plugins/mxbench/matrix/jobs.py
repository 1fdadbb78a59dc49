"""A variant as a job: the trainer's command line and the role plan's input. Pure.

One command line serves every launcher; a launcher only says where the data,
the logs and the interpreter are on its machines.
"""
from pathlib import PurePosixPath

from mxbench.matrix.variants import Variant
from mxbench_train.role_plan import Job


def trainer_args(variant: Variant, data_dir: str, log_dir: str) -> tuple:
    args = ["--num-layers", variant.num_layers, "--kv-store", variant.kvstore,
            "--batch-size", variant.batch_size, "--num-epochs", variant.epochs,
            "--disp-batches", variant.disp_batches,
            "--data-train", PurePosixPath(data_dir) / "cifar10_train.rec",
            "--data-val", PurePosixPath(data_dir) / "cifar10_val.rec",
            "--log-dir", log_dir]
    return tuple(str(a) for a in args)  # --gpus is each worker's own: the role plan adds it


def job_for(variant: Variant, *, data_dir, log_dir, python, hosts, port, cores_per_host, env=None,
            pythons=None, split_host_gpus=True) -> Job:
    return Job(trainer_args=trainer_args(variant, data_dir, log_dir), kvstore=variant.kvstore,
               workers=variant.workers, hosts=tuple(hosts)[:variant.hosts], port=port, python=python,
               pythons=dict(pythons or {}), cores_per_host=cores_per_host,
               env={"PYTHONUNBUFFERED": "1", **(env or {})}, gpus_per_worker=variant.gpus_per_worker,
               split_host_gpus=split_host_gpus)
