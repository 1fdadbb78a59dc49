"""What every launcher is, and what all of them share.

A launcher turns a variant into a role plan (``plan_roles``) and executes it on its machines with
``run_plan``: it starts each role through a handle (``RoleHandle``), and ``run_plan`` drives the
handles the same way whatever they stand for (a local process, a role behind an SSH channel, a
pod). The MXNet build under test is an input of ``execute``: each launcher says up front whether it
can honour a build (``build_problem``), makes what it needs before the runs (``prepare_build``:
a venv on each SSH host), and runs the build's interpreter or image, never another one; what it
used comes back in ``Launched.runtime``.
"""
import json
import os
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Protocol, Sequence, Tuple

from mxbench.builds.record import RunBuild
from mxbench.run_folder import RunFolder
from mxbench_train.errors import MxbenchError
from mxbench_train.role_log import CappedLog, LineSplitter, TaskLogEcho

if TYPE_CHECKING:
    from mxbench.matrix.variants import Target, Variant
    from mxbench_train.plan_runner import RoleResult
    from mxbench_train.role_plan import Role

# each launcher's step times (StepTimes), written beside the run's records
STEP_TIME_FILES = frozenset(RunFolder.STEP_TIMES.values())
# the launcher's own records in a run folder: what comes back from a host or pod never replaces them
# nor is taken in their place (a host's ssh.json or kubernetes.json would reach the run's record)
LOCAL_ONLY = frozenset(RunFolder.FILES) | STEP_TIME_FILES


@dataclass
class Launched:
    """What ``execute`` gives back: the plan it ran, each role's result, and what the roles ran
    with: ``{"python": path}`` (local, ssh: the first host's) or ``{"image": name}`` (kubernetes);
    ``link_bits``: the rate of the slowest link between its hosts, bits/s, where the hosts' settings
    state one (ssh: ``mxbench_link_rate``), else None."""

    plan: List["Role"]
    results: List["RoleResult"]
    runtime: Dict[str, str] = field(default_factory=dict)
    link_bits: Optional[float] = None


class RoleHandle(Protocol):
    """One started role, as ``run_plan`` drives it (``mxbench_train.plan_runner.LocalProcess``,
    ``ssh.remote_role.RemoteRole``, ``kubernetes.role_pods.RolePod``)."""

    pid: Optional[int]

    @property
    def returncode(self) -> Optional[int]: ...

    def poll(self) -> Optional[int]: ...

    def describe(self) -> str: ...  # how it ended, in words ("was killed by SIGKILL ...")

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float) -> None: ...

    def close(self) -> None: ...

    def record(self) -> Optional[dict]: ...  # what ``reap`` needs to find it again, if anything


class Launcher(Protocol):
    name: str

    def target(self) -> "Target": ...  # what its machines offer, asked of them

    def build_problem(self, build: Optional[RunBuild]) -> Optional[str]: ...  # why it cannot honour it

    def prepare_build(self, build: Optional[RunBuild]) -> None: ...  # make what the build needs there

    def execute(self, variant: "Variant", data_dir, run_folder: RunFolder, deadline_s: float,
                build: Optional[RunBuild] = None) -> Launched: ...

    def reap(self, run_folder: RunFolder) -> list: ...  # stop what an earlier, killed attempt left running

    # each of the variant's hosts over ``seconds`` ({host: mxbench_train.quiet_probe reading}), or an
    # MxbenchError saying why they cannot be looked at (mxbench.hosts.quiet_gate judges and waits)
    def quiet_probe(self, variant: "Variant", seconds: float) -> Dict[str, dict]: ...


# --- shared by the launchers -----------------------------------------------------------------

class StepTimes:
    """Times named steps into a JSON file, rewritten after each, so a failed run has them too."""

    def __init__(self, path: Path):
        self.path, self.record = Path(path), {}

    @contextmanager
    def __call__(self, name: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.record[name] = round(time.monotonic() - started, 3)
            self.path.write_text(json.dumps(self.record, indent=1))


def write_plan(run_folder: RunFolder, plan: Sequence["Role"]) -> None:
    """``plan.json``: the roles as run, for the report and for reading a run folder later."""
    run_folder.plan.write_text(json.dumps([r.to_dict() for r in plan], indent=1))


def cores_per_host(machines: Dict[str, Tuple[int, Optional[str]]]) -> int:
    """Cores a job may use on each host ({host: (cores, machine id)}): hosts that are one machine
    (two addresses of one box, like the loopback test hosts, or stand-in nodes) share its cores."""
    per_machine = Counter(machine or host for host, (_, machine) in machines.items())
    return max(1, min(cores // per_machine[machine or host] for host, (cores, machine) in machines.items()))


LOCAL_CORES_ENV = "MXBENCH_LOCAL_CORES"


def local_cores(hosts: int, environ=os.environ) -> int:
    """Cores each of a local run's ``hosts`` may use (they share this machine's): all of them, or at
    most ``MXBENCH_LOCAL_CORES``, a deployer's cap for a machine that also does other work (the test
    command sets 1: its processes train side by side, and each trainer's OpenMP threads spread over
    every core would crowd the others' out)."""
    cores = os.cpu_count() or 1
    raw = environ.get(LOCAL_CORES_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise MxbenchError(f"{LOCAL_CORES_ENV}={raw!r}: expected a whole number of at least 1 (the cores a "
                               f"local run shares among its processes; default all {cores} of this machine's)")
        cores = min(cores, int(raw))
    return max(1, cores // hosts)


class RoleLogSink:
    """A role's output on its way in: ``roles/<role>.log``, capped (``CappedLog``), and for a
    worker the task log too, each line prefixed ``[<role>@<where>]`` and cut short
    (``TaskLogEcho``). ``write`` takes raw chunks (an SSH channel), ``write_line`` whole lines."""

    def __init__(self, log_path: Path, role: str, where: str, echo: bool):
        self.log = CappedLog(log_path)
        self._lines = LineSplitter()
        self._echo = TaskLogEcho(f"[{role}@{where}]", self.log.head_max, str(log_path)) if echo else None

    def write(self, data: bytes) -> None:
        self.log.write(data)
        if self._echo:
            for line in self._lines.feed(data):
                self._echo.line(line.decode(errors="replace"))

    def write_line(self, raw: bytes) -> None:
        self.log.write(raw + b"\n")
        if self._echo:
            self._echo.line(raw.decode(errors="replace"))

    @property
    def written(self) -> int:
        return self.log.written

    def flush(self) -> None:
        self.log.flush()

    def close(self) -> None:
        self.log.close()
