"""The local launcher: the role plan as processes on this machine (the embedded default)."""
import json
import os
from pathlib import Path

from mxbench_train.launcher import free_port, reap, run_plan
from mxbench_train.roles import plan_roles
from mxbench_train.telemetry import gpu_environment

from .. import config
from ..jobs import job_for
from ..variants import Target, Variant

HOST = "127.0.0.1"


def loopback_hosts(count: int):
    """Stand-ins for ``count`` hosts on this machine: 127.0.0.1, 127.0.0.2, ... (all of 127/8 is local)."""
    return tuple(f"127.0.0.{i + 1}" for i in range(count))


class LocalLauncher:
    name = "local"

    def target(self) -> Target:
        gpu = gpu_environment()
        return Target(self.name, hosts=1, gpus_per_host=len(gpu.get("gpus", [])) if gpu["available"] else 0,
                      one_machine=True)

    def plan(self, variant: Variant, data_dir, run_dir):
        hosts = loopback_hosts(variant.hosts)
        job = job_for(variant, data_dir=str(data_dir), log_dir=str(run_dir), python=config.train_python(),
                      hosts=hosts, port=free_port(HOST),
                      cores_per_host=max(1, (os.cpu_count() or 1) // len(hosts)))  # the hosts share the cores
        return plan_roles(job)

    def execute(self, variant: Variant, data_dir, run_dir, deadline_s: float):
        plan = self.plan(variant, data_dir, run_dir)
        (Path(run_dir) / "plan.json").write_text(json.dumps([r.to_dict() for r in plan], indent=1))
        return plan, run_plan(plan, run_dir, deadline_s=deadline_s)

    def reap(self, run_dir) -> list:
        """Kill what an earlier attempt of this run left alive (its task was SIGKILLed, say)."""
        return reap(Path(run_dir) / "pids.json")
