"""The DAG run's folder, told once: ``DagRunFolder`` and ``RunFolder`` give every path of its
layout, and no other module of ``mxbench`` spells one of its file names."""
import ast

from conftest import REPO
from mxbench.run_folder import DagRunFolder, RunFolder
from mxbench_train import run_files

PACKAGE = REPO / "plugins" / "mxbench"


def test_the_dag_run_folder_names_its_files(tmp_path):
    folder = DagRunFolder(str(tmp_path))  # a str is taken as a path
    assert folder.path == tmp_path
    assert folder.request == tmp_path / "request.json"
    assert folder.data == tmp_path / "data.json"
    assert folder.stages == tmp_path / "stages.json"
    assert folder.stored == tmp_path / "stored.json"
    assert folder.tables == tmp_path / "tables"
    assert folder.table("runs") == tmp_path / "tables" / "runs.csv"
    assert folder.bisect == tmp_path / "tables" / "bisect.json"
    assert folder.report == tmp_path / "report"
    assert folder.attempts == tmp_path / "attempts"
    assert DagRunFolder.FILES == ("request.json", "data.json", "stages.json", "stored.json")


def test_a_run_folder_names_its_files(tmp_path):
    run = DagRunFolder(tmp_path).run("r1")
    assert run == RunFolder(tmp_path / "r1")
    assert DagRunFolder(tmp_path).run(7).path == tmp_path / "7"  # keys from a CSV table may read as numbers
    assert (run.meta, run.plan, run.metrics, run.notices, run.pids, run.remote) == tuple(
        tmp_path / "r1" / name
        for name in ("meta.json", "plan.json", "metrics.json", "notices.json", "pids.json", "remote.json"))
    assert set(RunFolder.FILES) == {"meta.json", "plan.json", "pids.json", "remote.json", "notices.json",
                                    "metrics.json"}
    assert [run.step_times(launcher) for launcher in ("local", "ssh", "kubernetes")] == [
        tmp_path / "r1" / name for name in ("local.json", "ssh.json", "kubernetes.json")]
    assert run.roles == tmp_path / "r1" / "roles"


def test_a_run_folder_finds_its_telemetry_and_role_logs(tmp_path):
    run = RunFolder(tmp_path)
    assert run.gpu_telemetry() == [] and run.role_logs() == []
    (tmp_path / "roles").mkdir()
    for name in ("gpu-rank1.csv", "gpu-rank0.csv", "rank0.log", "roles/server-0.log", "roles/worker-0.log"):
        (tmp_path / name).write_text("")
    assert run.gpu_telemetry() == [tmp_path / "gpu-rank0.csv", tmp_path / "gpu-rank1.csv"]
    assert run.role_logs() == [tmp_path / "roles" / "server-0.log", tmp_path / "roles" / "worker-0.log"]


def test_the_files_the_trainer_writes_are_the_ones_a_run_folder_finds(tmp_path):
    run = RunFolder(tmp_path)
    written = [run_files.worker_log(tmp_path, 0), run_files.gpu_telemetry(tmp_path, 1),
               run_files.role_log(tmp_path, "worker-0")]
    assert written == [tmp_path / "rank0.log", tmp_path / "gpu-rank1.csv", tmp_path / "roles" / "worker-0.log"]
    for path in written:
        path.parent.mkdir(exist_ok=True)
        path.write_text("")
    assert (run.logs(), run.gpu_telemetry(), run.role_logs()) == ([written[0]], [written[1]], [written[2]])
    assert run.pids == tmp_path / run_files.PIDS


def test_the_report_files_live_in_the_report_folder(tmp_path):
    folder = DagRunFolder(tmp_path)
    assert (folder.report_markdown, folder.report_html) == (tmp_path / "report" / "report.md",
                                                            tmp_path / "report" / "report.html")


def test_earlier_attempts_are_a_runs_folders_moved_aside(tmp_path):
    folder = DagRunFolder(tmp_path)
    assert folder.earlier_attempts("r1") == []
    for name in ("r1.2", "r1.1", "r10.1"):
        (folder.attempts / name).mkdir(parents=True)
    assert folder.earlier_attempts("r1") == [folder.attempts / "r1.1", folder.attempts / "r1.2"]


def test_a_run_folder_finds_its_logs(tmp_path):
    run = RunFolder(tmp_path)
    assert run.logs() == []
    (tmp_path / "roles").mkdir()
    (tmp_path / "roles" / "worker-0.log").write_text("")
    assert run.logs() == [tmp_path / "roles" / "worker-0.log"]  # a kubernetes run's pods
    (tmp_path / "rank1.log").write_text("")
    (tmp_path / "rank0.log").write_text("")
    assert run.logs() == [tmp_path / "rank0.log", tmp_path / "rank1.log"]


LAYOUT_NAMES = {*DagRunFolder.FILES, *RunFolder.FILES, DagRunFolder.TABLES, DagRunFolder.ATTEMPTS, DagRunFolder.BISECT,
                DagRunFolder.REPORT_MARKDOWN, DagRunFolder.REPORT_HTML, *RunFolder.STEP_TIMES.values(), RunFolder.ROLES,
                RunFolder.WORKER_LOGS, RunFolder.GPU_TELEMETRY, "runs.csv"}


def spelled_names(source: str) -> list:
    """The string constants (f-strings' pieces too) that are a layout file's name or a path ending in
    one, or a path under ``tables/``. Prose that mentions a name (a docstring, a message) is not one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if (text in LAYOUT_NAMES or any(text.endswith("/" + name) for name in LAYOUT_NAMES)
                    or text.startswith(DagRunFolder.TABLES + "/")):
                found.append((node.lineno, text))
    return found


def test_the_scan_finds_a_spelled_name():
    assert spelled_names('p = dag_dir / "request.json"') == [(1, "request.json")]
    assert spelled_names('p = f"{key}/meta.json"') == [(1, "/meta.json")]
    assert spelled_names('p = f"tables/{name}.csv"') == [(1, "tables/")]
    assert spelled_names('"""Reads request.json and tables/runs.csv."""\nraise E(f"{d} has no request.json")') == []


def test_no_module_spells_a_run_folder_file_name():
    spelled = [f"{path.relative_to(PACKAGE)}:{line}: {text!r}"
               for path in sorted(PACKAGE.rglob("*.py")) if path.name != "run_folder.py"
               for line, text in spelled_names(path.read_text())]
    assert not spelled, "spell these through mxbench.run_folder's DagRunFolder/RunFolder:\n" + "\n".join(spelled)
