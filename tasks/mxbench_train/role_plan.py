"""The role plan: one pure function from a job to the processes that run it.

A ``dist_*`` kvstore job is a scheduler, ``servers`` parameter servers and
``workers`` trainers, wired together by ``DMLC_*`` variables (ps-lite's
protocol). Local, SSH and Kubernetes launchers all execute the same plan; only
how they start a process differs. A non-distributed job is one worker.
"""
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

KVSTORES = ("local", "device", "dist_sync", "dist_device_sync", "dist_async")
TRAINER_MODULE = "mxbench_train"


@dataclass(frozen=True)
class Job:
    """What to run: the trainer's own flags, how many of each role, and where."""

    trainer_args: Tuple[str, ...]
    kvstore: str = "local"
    workers: int = 1
    servers: Optional[int] = None  # default: one per worker, as mxnet.tools.launch does
    hosts: Tuple[str, ...] = ("127.0.0.1",)
    port: int = 9091
    python: str = "python3"
    pythons: Mapping[str, str] = field(default_factory=dict)  # host -> its interpreter, where not python
    cores_per_host: int = 1
    env: Mapping[str, str] = field(default_factory=dict)  # passed to every role
    gpus_per_worker: int = 0  # each worker trains on this many GPUs (``--gpus``); 0: on the CPU
    # workers on one host split its GPUs (the 2nd of 4 one-GPU workers gets GPU 1); False: every
    # worker numbers its own GPUs from 0 (a Kubernetes pod sees only the GPUs it was given)
    split_host_gpus: bool = True


@dataclass(frozen=True)
class Role:
    """One process of the plan: run ``argv`` on ``host`` with ``env`` added."""

    name: str  # scheduler, server-0, worker-1: unique, used for log file names
    kind: str  # scheduler | server | worker
    host: str
    argv: Tuple[str, ...]
    env: Dict[str, str]

    def to_dict(self):
        return {"name": self.name, "kind": self.kind, "host": self.host,
                "argv": list(self.argv), "env": dict(self.env)}

    @classmethod
    def from_dict(cls, data):
        return cls(data["name"], data["kind"], data["host"], tuple(data["argv"]), dict(data["env"]))


def is_distributed(kvstore):
    return kvstore.startswith("dist")


def threads_per_process(cores, processes):
    """Split a host's cores among the busy processes on it (at least one each).

    Left unset, OpenMP in a lone process uses one core here; several processes
    each taking every core slow one another down.
    """
    return max(1, cores // max(1, processes))


def plan_roles(job: Job) -> List[Role]:
    if job.kvstore not in KVSTORES:
        raise ValueError(f"unknown kvstore {job.kvstore!r}; expected one of {', '.join(KVSTORES)}")
    if job.workers < 1:
        raise ValueError(f"workers must be at least 1, got {job.workers}")
    if not job.hosts:
        raise ValueError("a job needs at least one host")

    def trainer(host, nth_on_host=0):
        first = nth_on_host * job.gpus_per_worker if job.split_host_gpus else 0
        gpus = ("--gpus", ",".join(str(g) for g in range(first, first + job.gpus_per_worker))) \
            if job.gpus_per_worker else ()
        return (job.pythons.get(host, job.python), "-m", TRAINER_MODULE, "train", *job.trainer_args, *gpus)

    if not is_distributed(job.kvstore):
        if job.workers != 1:
            raise ValueError(f"kvstore {job.kvstore!r} runs one worker; use a dist_* kvstore for {job.workers}")
        env = {**job.env, "OMP_NUM_THREADS": str(threads_per_process(job.cores_per_host, 1))}
        return [Role("worker-0", "worker", job.hosts[0], trainer(job.hosts[0]), env)]

    servers = job.workers if job.servers is None else job.servers
    if servers < 1:
        raise ValueError(f"a {job.kvstore} job needs at least one server, got {servers}")
    worker_hosts = _spread(job.workers, job.hosts)
    server_hosts = _spread(servers, job.hosts)
    scheduler_host = job.hosts[0]
    common = {
        **job.env,
        "DMLC_PS_ROOT_URI": scheduler_host,
        "DMLC_PS_ROOT_PORT": str(job.port),
        "DMLC_NUM_SERVER": str(servers),
        "DMLC_NUM_WORKER": str(job.workers),
    }

    def serve(host):
        return (job.pythons.get(host, job.python), "-m", TRAINER_MODULE, "serve")

    def role(name, kind, host, argv, threads):
        env = {**common, "DMLC_ROLE": kind, "DMLC_NODE_HOST": host, "OMP_NUM_THREADS": str(threads)}
        return Role(name, kind, host, argv, env)

    plan = [role("scheduler", "scheduler", scheduler_host, serve(scheduler_host), 1)]
    plan += [role(f"server-{i}", "server", host, serve(host), 1) for i, host in enumerate(server_hosts)]
    plan += [
        role(f"worker-{i}", "worker", host, trainer(host, worker_hosts[:i].count(host)),
             threads_per_process(job.cores_per_host, worker_hosts.count(host)))
        for i, host in enumerate(worker_hosts)
    ]
    return plan


def _spread(count: int, hosts: Sequence[str]) -> List[str]:
    """Round-robin ``count`` processes over ``hosts``, as mxnet.tools.launch does."""
    return [hosts[i % len(hosts)] for i in range(count)]
