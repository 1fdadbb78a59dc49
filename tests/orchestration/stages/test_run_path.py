"""The run task's path loads no pandas and no numpy (issue 20 §6): a run task pays for the trainer, not
for the tables. What it imports is read from ``RunVariantOperator`` itself, so an import added there is
checked too; then a run goes through ``run_stage.run_one`` (ok, and failed), as ``execute`` runs it.
Nor does the parse of a DAG file, which every task process does before its task, load the Kubernetes
provider's operator, the ``kubernetes`` client or pandas: a local or ssh run does not pay for them."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mxbench.builds import build_provenance
from mxbench.results.parse import MAX_LINE, parse_run_logs
from mxbench.run_folder import RunFolder
from mxbench_train.events import format_event

REPO = Path(__file__).resolve().parents[3]
OPERATORS = REPO / "plugins" / "mxbench" / "airflow_glue" / "operators.py"
TASK_METHODS = ("pre_execute", "execute", "run_in", "kubernetes_launcher", "pod_operator", "on_kill")


def imports_of_the_run_task():
    """The import statements in the run task's methods (they import lazily), as source lines."""
    tree = ast.parse(OPERATORS.read_text())
    operator = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "RunVariantOperator")
    lines = []
    for method in operator.body:
        if isinstance(method, ast.FunctionDef) and method.name in TASK_METHODS:
            lines += [ast.unparse(node) for node in ast.walk(method) if isinstance(node, (ast.Import, ast.ImportFrom))]
    return lines


PROBE = """
import sys
from pathlib import Path
from types import SimpleNamespace

import mxbench.airflow_glue.operators
{imports}
from mxbench import artifacts
from mxbench.stages import run_stage
from mxbench.launchers import Launched
from mxbench.run_folder import read_json
from mxbench.matrix.variants import Target, expand_runs
from mxbench_train.errors import MxbenchError
from mxbench_train.events import format_event

dag_dir = Path(sys.argv[1])
runs = expand_runs({{"preset": "cpu-demo", "repeats": 2, "only_variants": ["cpu1-bs32"]}},
                   {{"local": Target("local", 1, 0, one_machine=True)}})
data = {{"dir": str(dag_dir / "data"), "records": {{"train": 10_000}}}}


class Trains:
    def __init__(self, fails):
        self.fails = fails

    def reap(self, run_folder):
        return []

    def execute(self, variant, data_dir, run_folder, deadline_s, build=None):
        (run_folder.path / "rank0.log").write_text(
            format_event("run_start", rank=0, environment={{"mxnet_version": "1.9.1"}}) + "\\n")
        if self.fails:
            raise MxbenchError("role worker-0 was killed by SIGKILL (exit status 137)")
        return Launched([], [SimpleNamespace(start_s=0.0, wall_s=1.0, warning=None)], {{"python": "/usr/bin/python3"}})


for run, fails in zip(runs, (False, True)):
    with artifacts.run_folder("mxbench_probe", "manual__probe", run["key"], extra={{}}) as space:
        try:
            result = run_stage.run_one(run, space.folder, data, 60, launcher_for=lambda name: Trains(fails))
        except run_stage.RunFailed as exc:
            result = {{"status": "failed", "cause": str(exc)}}
        meta = read_json(space.folder.path / run["key"] / "meta.json")
        print(result["status"], meta["build"]["reported"])
print("heavy:", ",".join(m for m in ("pandas", "numpy") if m in sys.modules) or "-")
"""


def test_the_run_task_imports_no_pandas_and_no_numpy(tmp_path):
    imports = imports_of_the_run_task()
    # what run_in and kubernetes_launcher import; the probe below imports them all
    assert "from mxbench import artifacts, config" in imports
    assert "from mxbench.stages import run_stage" in imports, imports
    probe = PROBE.format(imports="\n".join(imports))
    path = [str(REPO / "plugins"), str(REPO / "tasks"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "MXBENCH_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "dag")], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    # both runs went through run_one and read their trainer's version (reported_version, ran_with)
    assert lines[-3:-1] == ["ok 1.9.1", "failed 1.9.1"], done.stdout
    assert lines[-1] == "heavy: -", done.stdout[-2000:]


# the task process's parse of its DAG file (airflow.sdk.execution_time.task_runner.parse), in a fresh process
PARSE = """
import sys

from airflow.dag_processing.dagbag import BundleDagBag

loaded = set(sys.modules)  # Airflow itself loads the provider's exceptions module; the parse must add nothing of it
bag = BundleDagBag(dag_folder=sys.argv[1], safe_mode=False, load_op_links=False, bundle_path=sys.argv[2],
                   bundle_name="dags-folder")
assert bag.dags and not bag.import_errors, bag.import_errors
heavy = {name.split(".")[0] for name in sys.modules}.intersection({"kubernetes", "kubernetes_asyncio", "pandas"})
heavy |= {".".join(name.split(".")[:5]) for name in set(sys.modules) - loaded
          if name.startswith("airflow.providers.cncf.kubernetes.")}
print("dags:", ",".join(sorted(bag.dags)))
print("heavy:", ",".join(sorted(heavy)) or "-")
"""


@pytest.mark.parametrize("dag_file", sorted(p.name for p in (REPO / "dags").glob("*.py")))
def test_parsing_a_dag_file_loads_no_kubernetes_and_no_pandas(tmp_path, dag_file):
    """What each run task's process parses first; the Kubernetes provider loads in a Kubernetes run only."""
    path = [str(REPO / "plugins"), str(REPO / "tasks"), str(REPO / "dags"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "MXBENCH_HOME": str(tmp_path / "home"), "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run([sys.executable, "-c", PARSE, str(REPO / "dags" / dag_file), str(REPO / "dags")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-2] == f"dags: {Path(dag_file).stem}", done.stdout[-2000:]  # the file's one DAG was parsed
    assert lines[-1] == "heavy: -", done.stdout[-2000:]


def log_lines(*events, long_line=False):
    lines = ["INFO:root:Epoch[0] Batch [20]\tSpeed: 100.00 samples/sec\taccuracy=0.1"]
    for event in events:
        lines.append(format_event("run_start", **event))
        lines.append("INFO:root:Epoch[0] Batch [20]\tSpeed: 100.00 samples/sec\taccuracy=0.1")
    if long_line:  # an event line past MAX_LINE is no event, to either reader
        lines.append(format_event("run_start", rank=0, environment={"mxnet_version": "9.9.9"}, pad="x" * MAX_LINE))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("events, long_line", [
    ([], False),
    ([{"rank": 0, "environment": {"mxnet_version": "1.9.1"}}], False),
    ([{"rank": 0}, {"rank": 0, "environment": {"mxnet_version": "1.9.1"}}], False),  # a restart reports it
    ([{"rank": 0, "environment": {"mxnet_version": "1.9.1"}}, {"rank": 0, "environment": {}}], False),  # restart
    ([{"rank": 0, "environment": {"mxnet_version": "1.8.0"}}, {"rank": 0, "environment": {"mxnet_version": "1.9.1"}}],
     False),
    ([{"rank": 0, "environment": {"mxnet_version": "1.8.0"}}, {"rank": 1, "environment": {"mxnet_version": "1.9.1"}}],
     False),  # two ranks of one run in one log: the first
    ([{"environment": {"mxnet_version": "1.8.0"}}, {"environment": {"mxnet_version": "1.9.1"}}], False),
    ([{"rank": 0, "environment": {"mxnet_version": "1.9.1" * 10}}], True),
])
def test_the_reported_version_is_what_the_log_parser_reads(tmp_path, events, long_line):
    """``reported_version`` reads only the events, without pandas, as ``parse`` reads a log: the
    first version reported in the log's last run."""
    (tmp_path / "rank0.log").write_text(log_lines(*events, long_line=long_line))
    (tmp_path / "rank1.log").write_text(log_lines({"rank": 1, "environment": {"mxnet_version": "1.9.1"}}))
    parsed = []
    for log in sorted(tmp_path.glob("rank*.log")):
        start = next((e for e in parse_run_logs([log]).events
                      if e.get("event") == "run_start" and (e.get("environment") or {}).get("mxnet_version")), None)
        if start:
            parsed.append(str(start["environment"]["mxnet_version"])[:20])
    assert build_provenance.reported_version(RunFolder(tmp_path)) == (", ".join(sorted(set(parsed))) or None)


def test_the_reported_version_reads_the_role_logs_where_there_are_no_rank_logs(tmp_path):
    (tmp_path / "roles").mkdir()
    (tmp_path / "roles" / "worker-0.log").write_text(log_lines({"rank": 0, "environment": {"mxnet_version": "1.9.1"}}))
    (tmp_path / "roles" / "worker-1.log").write_text(log_lines({"rank": 1, "environment": {"mxnet_version": "1.8.0"}}))
    assert build_provenance.reported_version(RunFolder(tmp_path)) == "1.8.0, 1.9.1"
    assert build_provenance.reported_version(RunFolder(tmp_path / "roles")) is None
    assert build_provenance.MAX_LINE == MAX_LINE  # one line length for both readers
