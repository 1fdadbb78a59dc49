"""The local launcher: the role plan as processes on this machine (the embedded default)."""
import json
from typing import Dict, Optional

from mxbench import config
from mxbench.builds.record import RunBuild
from mxbench.launchers.base import Launched, StepTimes, local_cores, write_plan
from mxbench.matrix.jobs import job_for
from mxbench.matrix.variants import Target, Variant
from mxbench.run_folder import RunFolder
from mxbench_train.errors import MxbenchError
from mxbench_train.localhost import free_port, pid_scope
from mxbench_train.plan_runner import reap, run_plan
from mxbench_train.role_plan import plan_roles
from mxbench_train.telemetry import gpu_environment

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

    def build_problem(self, build: Optional[RunBuild]) -> Optional[str]:
        if build is not None and not build.python:
            return f"{build} has no training interpreter on this machine (resolve_build makes it)"
        return None

    def prepare_build(self, build: Optional[RunBuild]) -> None:
        """Nothing more: resolve_build made the build's venv on this machine."""

    @staticmethod
    def python_for(build: Optional[RunBuild]) -> str:
        return build.python if build is not None else config.train_env_python()

    def quiet_probe(self, variant: Variant, seconds: float) -> Dict[str, dict]:
        """This machine over ``seconds`` (``mxbench_train.quiet_probe.sample``), whatever loopback hosts the
        variant has: ours are the run task, what it started and the processes above it (its task
        supervisor, the Airflow worker or executor, up to init); every other process is foreign."""
        from mxbench_train.quiet_probe import sample

        reading = sample(seconds)
        return {reading["host"]: reading}

    def plan(self, variant: Variant, data_dir, run_folder: RunFolder, python: Optional[str] = None):
        hosts = loopback_hosts(variant.hosts)
        job = job_for(variant, data_dir=str(data_dir), log_dir=str(run_folder.path),
                      python=python or config.train_env_python(), hosts=hosts, port=free_port(HOST),
                      cores_per_host=local_cores(len(hosts)))  # the hosts share the cores
        return plan_roles(job)

    def execute(self, variant: Variant, data_dir, run_folder: RunFolder, deadline_s: float,
                build: Optional[RunBuild] = None) -> Launched:
        problem = self.build_problem(build)
        if problem:
            raise MxbenchError(problem)
        python = self.python_for(build)
        plan = self.plan(variant, data_dir, run_folder, python)
        write_plan(run_folder, plan)
        steps = StepTimes(run_folder.step_times("local"))  # as the ssh and kubernetes launchers time theirs
        with steps("roles_s"):
            results = run_plan(plan, run_folder.path, deadline_s=deadline_s)
        return Launched(plan, results, {"python": python})

    def reap(self, run_folder: RunFolder) -> list:
        """Kill what an earlier attempt of this run left alive (its task was SIGKILLed, say), when
        it ran on this machine: a run folder from another worker (the artifact store's) names
        that machine's processes, and their pids here are someone else's."""
        meta = run_folder.meta
        ran_on = json.loads(meta.read_text()).get("machine") if meta.is_file() else None
        if ran_on not in (None, pid_scope()):
            return []
        return reap(run_folder.pids)
