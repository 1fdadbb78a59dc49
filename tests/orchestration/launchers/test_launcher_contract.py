"""The launcher contract (``mxbench.launchers.base``) and the launchers' pure parts, without
Airflow, a network or a cluster: one registry, no launcher importing another, the MXNet build an
input of ``execute`` that each launcher honours or refuses by name, one exit decoder, one log sink.
The launchers against real machines are test_ssh_launcher.py, test_dag_kubernetes.py and
tests/dags/test_dag_builds.py."""
import ast
import inspect
import json
import re
import shlex
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import REPO
from mxbench import launchers, run_folder
from mxbench.builds import build_provenance
from mxbench.builds.record import RunBuild
from mxbench.launchers.base import Launched, RoleLogSink
from mxbench.launchers.kubernetes.kubernetes_launcher import KubernetesLauncher
from mxbench.launchers.kubernetes.pods import image_for, pod_settings, role_pod
from mxbench.launchers.local import LocalLauncher
from mxbench.launchers.ssh.commands import SshHost, build_command, builds_problem, host_settings, setup_command
from mxbench.launchers.ssh.ssh_launcher import SshLauncher
from mxbench.matrix.variants import Target, VariantError, expand_runs
from mxbench.run_folder import DagRunFolder, RunFolder
from mxbench.stages import pipeline, run_stage
from mxbench_train.errors import MxbenchError
from mxbench_train.events import format_event
from mxbench_train.plan_runner import describe_exit
from mxbench_train.role_plan import Role

LAUNCHER_DIR = REPO / "plugins" / "mxbench" / "launchers"
OLD = RunBuild("mxnet==1.9.0", "1.9.0", ("mxnet==1.9.0", "numpy<1.24"), "/envs/mxnet-1.9.0/bin/python",
               "mxbench-train:1.9.0-cu112")


def pod(**settings):
    extra = {"mxbench_pod": {"image": "mxbench-train:latest", "data": {"host_path": "/srv/data"}, **settings}}
    return pod_settings("mxbench_kubernetes", extra)


# --- one contract -----------------------------------------------------------------------------

def test_one_registry_names_every_launcher_and_each_takes_the_build_in_execute():
    assert launchers.LAUNCHERS == {"local": LocalLauncher, "ssh": SshLauncher, "kubernetes": KubernetesLauncher}
    for cls in launchers.LAUNCHERS.values():
        for method in ("target", "build_problem", "prepare_build", "execute", "reap"):
            assert callable(getattr(cls, method, None)), (cls, method)
        assert "build" in inspect.signature(cls.execute).parameters, cls


def test_no_launcher_imports_another_and_pure_parts_import_no_client_library():
    # what each launcher file may import of mxbench.launchers: the shared contract (base) and, for
    # the ssh and kubernetes packages, only the parts below it in its own package (the pure
    # commands and pods import nothing of theirs)
    base = {"mxbench.launchers.base"}
    own = {"local.py": base,
           "ssh/ssh_launcher.py": base | {"mxbench.launchers.ssh.commands", "mxbench.launchers.ssh.remote_role",
                                      "mxbench.launchers.ssh.transfer"},
           "ssh/commands.py": base, "ssh/remote_role.py": base | {"mxbench.launchers.ssh.commands"},
           "ssh/transfer.py": base | {"mxbench.launchers.ssh.commands"},
           "kubernetes/kubernetes_launcher.py": base | {"mxbench.launchers.kubernetes.pods",
                                                        "mxbench.launchers.kubernetes.role_pods"},
           "kubernetes/pods.py": base, "kubernetes/role_pods.py": base | {"mxbench.launchers.kubernetes.pods"}}
    files = {str(p.relative_to(LAUNCHER_DIR)) for p in LAUNCHER_DIR.rglob("*.py")}
    assert files - set(own) == {"__init__.py", "base.py", "ssh/__init__.py", "kubernetes/__init__.py"}, files
    for name, allowed in own.items():
        tree = ast.parse((LAUNCHER_DIR / name).read_text())
        assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree)), name
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        strays = {m for m in imported if m.startswith("mxbench.launchers")} - allowed
        assert not strays, (name, strays)
    # the pure parts load without paramiko, the kubernetes client or Airflow
    code = ("import sys; import mxbench.launchers.ssh.commands, mxbench.launchers.kubernetes.pods; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'paramiko', 'kubernetes', 'airflow'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env={"PYTHONPATH": f"{REPO / 'plugins'}:{REPO / 'tasks'}", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_a_build_never_shows_a_wheel_urls_password():
    build = RunBuild("mxnet @ https://bench:s3cret@wheels.example/mxnet-1.9.1-py3-none-any.whl#sha256=" + "0" * 64,
                     "1.9.1")
    assert "s3cret" not in str(build) and str(build).startswith("MXNet build mxnet @ https://")


def test_one_exit_decoder_for_processes_shells_and_containers():
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(137) == "was killed by SIGKILL (exit status 137)"  # sshd, a container runtime
    assert describe_exit(143) == "was killed by SIGTERM (exit status 143)"
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(128) == "exited with code 128"


def test_one_log_sink_writes_the_role_log_and_echoes_workers_with_one_prefix(tmp_path, capsys):
    sink = RoleLogSink(tmp_path / "worker-0.log", "worker-0", "gpu-host-1", echo=True)
    sink.write(b"Epoch[0] Batch [20] Speed: 9")
    sink.write(b"39.26 samples/sec\npartial")
    sink.write_line(b"a whole line")
    sink.close()
    assert (tmp_path / "worker-0.log").read_bytes() == \
        b"Epoch[0] Batch [20] Speed: 939.26 samples/sec\npartiala whole line\n"
    out = capsys.readouterr().out.splitlines()
    assert out == ["[worker-0@gpu-host-1] Epoch[0] Batch [20] Speed: 939.26 samples/sec",
                   "[worker-0@gpu-host-1] a whole line"]


# --- the build under test: local --------------------------------------------------------------

def test_the_local_launcher_runs_the_builds_interpreter_and_refuses_a_build_without_one(tmp_path):
    from mxbench.matrix.variants import preset

    variant = next(v for v in preset("cpu-demo") if v.id == "cpu1-bs32")
    plan = LocalLauncher().plan(variant, "/data", RunFolder(tmp_path), LocalLauncher.python_for(OLD))
    assert {r.argv[0] for r in plan} == {OLD.python}
    assert "no training interpreter" in LocalLauncher().build_problem(RunBuild("mxnet==1.9.0", "1.9.0"))
    with pytest.raises(MxbenchError, match="no training interpreter"):
        LocalLauncher().execute(variant, "/data", RunFolder(tmp_path), 10, build=RunBuild("mxnet==1.9.0", "1.9.0"))


def test_a_local_run_uses_the_machines_cores_or_at_most_the_deployers_cap(tmp_path, monkeypatch):
    import os

    from mxbench.launchers.base import LOCAL_CORES_ENV
    from mxbench.matrix.variants import preset

    variant = next(v for v in preset("cpu-demo") if v.id == "cpu1-bs32")

    def threads():
        return [role.env["OMP_NUM_THREADS"] for role in LocalLauncher().plan(variant, "/data", RunFolder(tmp_path))]

    monkeypatch.delenv(LOCAL_CORES_ENV, raising=False)  # scripts/test.sh sets it
    assert threads() == [str(os.cpu_count())]
    monkeypatch.setenv(LOCAL_CORES_ENV, "1")
    assert threads() == ["1"]
    monkeypatch.setenv(LOCAL_CORES_ENV, str(os.cpu_count() + 8))  # a cap: never more than the machine has
    assert threads() == [str(os.cpu_count())]
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv(LOCAL_CORES_ENV, bad)
        with pytest.raises(MxbenchError, match=re.escape(f"MXBENCH_LOCAL_CORES={bad!r}: expected a whole number")):
            LocalLauncher().plan(variant, "/data", RunFolder(tmp_path))


# --- the build under test: ssh ----------------------------------------------------------------

def ssh_host(**extra) -> SshHost:
    return host_settings("mxbench_gpu_1", "10.0.0.5", extra)


def test_an_ssh_build_command_makes_the_venv_there_with_every_value_quoted():
    host = ssh_host(mxbench_python="/opt/py/bin/python3", mxbench_env={"PIP_INDEX_URL": "https://pypi.internal/simple"})
    hostile = RunBuild("mxnet==1.9.0", "1.9.0", ("mxnet==1.9.0", "numpy<1.24; $(touch /tmp/pwned)"))
    argv = shlex.split(build_command(host, hostile, "/home/u/.cache/mxbench", "-P", 600))
    assert argv[:2] == ["env", "PIP_INDEX_URL=https://pypi.internal/simple"]
    assert argv[2:6] == ["/opt/py/bin/python3", "-P", "-m", "mxbench_train.host_build"]
    spec = json.loads(argv[argv.index("--spec-json") + 1])
    assert spec == {"package": "mxnet==1.9.0", "version": "1.9.0", "spec": list(hostile.spec)}  # one argument, as is
    assert "--check-only" not in argv and argv[argv.index("--pip-timeout") + 1] == "600"


def test_a_run_finds_its_build_in_the_command_that_makes_its_folder():
    """No extra round trip per run: host_workdir finds the venv expand_variants made."""
    host = ssh_host(mxbench_python="/opt/py/bin/python3")
    plain = shlex.split(setup_command(host, RunFolder("/runs/dag-run/run-1"), "-P"))
    with_build = shlex.split(setup_command(host, RunFolder("/runs/dag-run/run-1"), "-P", OLD))
    assert with_build[:len(plain)] == plain and "--build-json" not in plain
    assert json.loads(with_build[with_build.index("--build-json") + 1]) == \
        {"package": "mxnet==1.9.0", "version": "1.9.0", "spec": ["mxnet==1.9.0", "numpy<1.24"]}


def test_an_ssh_host_with_prebuilt_interpreters_runs_only_those():
    host = ssh_host(mxbench_builds={"1.9.0": "/opt/mxnet-1.9.0/bin/python", "mxnet-cu112==1.9.1": "/opt/cu/bin/python"})
    assert host.python_for(OLD) == "/opt/mxnet-1.9.0/bin/python"
    assert host.python_for(RunBuild("mxnet-cu112==1.9.1", "1.9.1")) == "/opt/cu/bin/python"
    assert builds_problem(host, OLD) is None
    problem = builds_problem(host, RunBuild("mxnet==1.8.0.post0", "1.8.0.post0", ("mxnet==1.8.0.post0",)))
    assert "mxbench_gpu_1" in problem and "no interpreter for MXNet build mxnet==1.8.0.post0" in problem
    assert "makes no venvs" in problem
    with pytest.raises(MxbenchError, match=r"mxbench_builds\['1.9.0'\] 'bin/python' must be an absolute path"):
        ssh_host(mxbench_builds={"1.9.0": "bin/python"})
    with pytest.raises(MxbenchError, match="mxbench_builds must be an object"):
        ssh_host(mxbench_builds=["1.9.0"])


def test_an_ssh_host_that_makes_venvs_cannot_install_a_file_of_the_airflow_worker():
    wheel = RunBuild("mxnet @ file:///wheels/mxnet-1.9.1-py3-none-any.whl", "1.9.1",
                     ("mxnet @ file:///wheels/mxnet-1.9.1-py3-none-any.whl", "numpy<1.24"))
    assert "installs a file of the Airflow worker" in builds_problem(ssh_host(), wheel)
    assert builds_problem(ssh_host(), OLD) is None
    assert "no install spec" in builds_problem(ssh_host(), RunBuild("mxnet==1.9.0", "1.9.0"))
    launcher = SshLauncher([ssh_host(),
                            host_settings("mxbench_gpu_2", "10.0.0.6", {"mxbench_builds": {"1.9.1": "/p"}})])
    assert launcher.build_problem(OLD).startswith(
        "ssh connection 'mxbench_gpu_2': its mxbench_builds has no interpreter")
    assert launcher.build_problem(None) is None


# --- the build under test: kubernetes ---------------------------------------------------------

def test_a_pod_runs_the_builds_image_from_the_map_or_the_template():
    assert image_for(pod(), None) == "mxbench-train:latest"
    assert image_for(pod(), OLD) is None  # no image for the build: never the connection's own
    assert image_for(pod(images={"1.9.0": "reg/x:190"}), OLD) == "reg/x:190"
    assert image_for(pod(images={"mxnet==1.9.0": "reg/x:pkg"}, image_template="t:{mxnet_version}"), OLD) == "reg/x:pkg"
    assert image_for(pod(image_template="registry.example/mxbench-train:{mxnet_version}"), OLD) == \
        "registry.example/mxbench-train:1.9.0"
    assert image_for(pod(image_template="registry.example/{image}"), OLD) == \
        "registry.example/mxbench-train:1.9.0-cu112"
    # a build without a manifest image gives no image from a template that needs it, not "registry.example/"
    assert image_for(pod(image_template="registry.example/{image}"), RunBuild("mxnet==1.9.0", "1.9.0")) is None
    with pytest.raises(MxbenchError, match=r"image_template .* is not a template of \{mxnet_version\}"):
        pod(image_template="reg/x:{version}")


COMMIT_WHEEL = RunBuild("mxnet @ file:///wheels/mxnet-1.9.1+g0123abcd-py3-none-any.whl", "1.9.1+g0123abcd",
                        image="mxbench-train:1.9.1", commit="0123abcd")


def test_a_commit_build_never_gets_a_release_image():
    """The attack: a wheel built at a commit is version 1.9.1+g<commit>; an image by version or package
    is the 1.9.1 release's, so a bisect over commit wheels would measure one image again and again."""
    release = {"1.9.1": "reg/x:191", "1.9.1+g0123abcd": "reg/x:191", COMMIT_WHEEL.package: "reg/x:191"}
    assert image_for(pod(images=release), COMMIT_WHEEL) is None
    assert image_for(pod(image_template="reg/mxbench-train:{mxnet_version}"), COMMIT_WHEEL) is None
    assert image_for(pod(image_template="reg/{image}"), COMMIT_WHEEL) is None  # the manifest's image: a release tag
    launcher = KubernetesLauncher(pod(images=release, image_template="reg/{image}"), client=None)
    assert launcher.build_problem(COMMIT_WHEEL) == (
        f"kubernetes connection 'mxbench_kubernetes' has no image of commit 0123abcd for {COMMIT_WHEEL}: an image "
        "by version (1.9.1+g0123abcd) or package is a release's, another MXNet; give one in mxbench_pod.images keyed "
        "by the commit, or an mxbench_pod.image_template that gives the manifest's image tagged src-0123abcd "
        "(docker/train-source.Dockerfile)")
    # an image that names the commit: keyed by it, or the manifest's source-built image
    assert image_for(pod(images={**release, "0123abcd": "reg/x:src-0123abcd"}), COMMIT_WHEEL) == "reg/x:src-0123abcd"
    source = RunBuild("mxnet==1.9.1", "1.9.1", image="mxbench-train:src-0123abcd5678", commit="0123abcd")
    assert image_for(pod(images=release, image_template="reg/{image}"), source) == "reg/mxbench-train:src-0123abcd5678"
    assert KubernetesLauncher(pod(image_template="reg/{image}"), client=None).build_problem(source) is None
    assert image_for(pod(image_template="reg/{image}"), RunBuild("mxnet==1.9.1", "1.9.1", image="x:src-99999999",
                                                                 commit="0123abcd")) is None


def test_a_role_pod_carries_the_runs_image(tmp_path):
    from dataclasses import replace

    settings = replace(pod(images={"1.9.0": "reg/x:190"}), image="reg/x:190")
    role = Role("worker-0", "worker", "node-1", ("python", "-m", "mxbench_train", "train"), {})
    base = {"metadata": {}, "spec": {"containers": [{"name": "base", "image": "mxbench-train:latest"}]}}
    body = role_pod(base, role, run="r" * 16, attempt="a1b2c3", run_key="k", settings=settings, gpus=0,
                    host_network=False, scheduler_ip="10.0.0.1", deadline_s=60)
    assert body["spec"]["containers"][0]["image"] == "reg/x:190"


def test_a_build_with_no_image_is_refused_at_expand_one_line_per_variant():
    launcher = KubernetesLauncher(pod(images={"1.9.1": "reg/x:191"}), client=None)
    problem = launcher.build_problem(OLD)
    assert problem == ("kubernetes connection 'mxbench_kubernetes' has no image for MXNet build mxnet==1.9.0: give "
                       "one in mxbench_pod.images (by version or package) or mxbench_pod.image_template")
    targets = {"local": Target("local", 1, 0, one_machine=True), "kubernetes": Target("kubernetes", 2, 0)}
    params = {"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32", "cpu2w-bs32"],
              "launchers": ["local", "kubernetes"]}
    with pytest.raises(VariantError) as refused:
        expand_runs(params, targets, refused={"kubernetes": problem})
    lines = str(refused.value).split("; ")
    assert lines == [f"variant {v} under kubernetes: {problem}" for v in ("cpu1-bs32", "cpu2w-bs32")]


def test_prepare_builds_refuses_what_a_launcher_cannot_honour_and_marks_failed_preparations(tmp_path):
    class NoImage:
        def build_problem(self, build):
            return "no image for it"

    class PipFails:
        def build_problem(self, build):
            return None

        def prepare_build(self, build):
            raise MxbenchError("host h: pip could not reach a package index")

    class Fine(PipFails):
        prepared = []

        def prepare_build(self, build):
            self.prepared.append(build)

    made = {"kubernetes": NoImage(), "ssh": PipFails(), "local": Fine()}
    targets = {name: Target(name, 1, 0) for name in made}
    unavailable = {}
    refused = pipeline.prepare_builds(list(made), targets, unavailable,
                                      {"package": "mxnet==1.9.0", "version": "1.9.0"}, made.get)
    assert refused == {"kubernetes": "no image for it"}
    assert unavailable == {"ssh": "the ssh target cannot run MXNet build mxnet==1.9.0: host h: pip could not "
                                  "reach a package index"}
    assert Fine.prepared == [RunBuild("mxnet==1.9.0", "1.9.0")]
    assert pipeline.prepare_builds(list(made), targets, {}, None, made.get) == {}  # no build: nothing to do


# --- the trainer's word on what ran -----------------------------------------------------------

@pytest.mark.parametrize("asked, reported, same", [("1.9.0", "1.9.0", True), ("1.7.0.post2", "1.7.0", True),
                                                   ("1.9.0", "1.9.1", False), ("1.9.0", None, False)])
def test_a_rebuilt_wheel_is_the_same_release_another_version_is_not(asked, reported, same):
    assert build_provenance.same_release(asked, reported) is same


@pytest.mark.parametrize("reported, same", [("1.9.1+g0123abcd", True), ("1.9.1+g0123abcdef0123", True),
                                            ("1.9.1", False), ("1.9.1+g99999999", False),
                                            ("1.9.1+g99999999.d2026", False), ("1.9.0+g0123abcd", False)])
def test_a_commit_builds_trainer_that_names_another_commit_or_none_is_not_that_build(reported, same):
    assert build_provenance.same_release("1.9.1+g0123abcd", reported, "0123abcd") is same


@pytest.mark.parametrize("named, required, same", [
    ("0123abcdef", True, True), ("0123abcd, 99999999", True, False), ("99999999", False, False),
    (None, True, False), (None, False, True)])
def test_a_source_builds_trainer_names_its_commit_beside_the_release(named, required, same):
    # a source build reports 1.9.1 and its image's commit; a venv of the commit's hash-checked
    # wheel (commit_required=False) may name none, never another
    assert build_provenance.same_release("1.9.1", "1.9.1", "0123abcd", named, commit_required=required) is same


def test_a_commit_builds_pod_that_reports_another_commit_fails_its_run(tmp_path):
    (run,) = expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"],
                          "launchers": ["kubernetes"]},
                         {"kubernetes": Target("kubernetes", 1, 0)})
    run = {**run, "build": COMMIT_WHEEL.to_dict()}

    class RunsAnotherCommit:
        def reap(self, run_folder):
            return []

        def execute(self, variant, data_dir, run_folder, deadline_s, build=None):
            (run_folder.path / "rank0.log").write_text(
                format_event("run_start", environment={"mxnet_version": "1.9.1+g99999999"}))
            return Launched([], [], {"image": "reg/x:src-0123abcd"})

    with pytest.raises(run_stage.RunFailed) as failed:
        run_stage.run_one(run, DagRunFolder(tmp_path), {"dir": str(tmp_path / "data"), "records": {"train": 10_000}},
                          60,
                          lambda name: RunsAnotherCommit())
    assert str(failed.value) == (f"run {run['key']} failed: it asked for {COMMIT_WHEEL} (commit 0123abcd), but its "
                                 "trainer imported MXNet 1.9.1+g99999999 (reg/x:src-0123abcd): not kept as "
                                 f"{COMMIT_WHEEL.package}")


def test_a_failed_run_still_records_what_it_ran_with(tmp_path):
    (run,) = expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"],
                          "launchers": ["kubernetes"]},
                         {"kubernetes": Target("kubernetes", 1, 0)})
    run = {**run, "build": {"package": "mxnet==1.9.0", "version": "1.9.0"}}

    class CrashesAfterStart:
        def reap(self, run_folder):
            return []

        def execute(self, variant, data_dir, run_folder, deadline_s, build=None):
            (run_folder.path / "kubernetes.json").write_text(json.dumps({"image": "reg/x:190"}))
            (run_folder.path / "rank0.log").write_text(
                format_event("run_start", environment={"mxnet_version": "1.9.0"}))
            raise MxbenchError("role worker-0 was killed by SIGKILL (exit status 137)")

    with pytest.raises(run_stage.RunFailed):
        run_stage.run_one(run, DagRunFolder(tmp_path), {"dir": str(tmp_path / "data"), "records": {"train": 10_000}},
                          60,
                          lambda name: CrashesAfterStart())
    meta = json.loads((tmp_path / run["key"] / "meta.json").read_text())
    assert meta["build"] == {"asked": "mxnet==1.9.0", "reported": "1.9.0", "image": "reg/x:190", "python": None}


def test_a_run_expanded_before_runs_carried_their_build_still_trains_with_it(tmp_path):
    """A cleared run task of a DAG run expanded by the previous version: ``train_python`` only."""
    (run,) = expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]},
                         {"local": Target("local", 1, 0, one_machine=True)})
    run = {**run, "train_python": "/envs/190/bin/python"}
    run_folder.write_json(tmp_path / "request.json", {"build": {"package": "mxnet==1.9.0", "version": "1.9.0"}})
    seen = []

    class Records:
        def reap(self, run_folder):
            return []

        def execute(self, variant, data_dir, run_folder, deadline_s, build=None):
            seen.append(build)
            (run_folder.path / "rank0.log").write_text(
                format_event("run_start", environment={"mxnet_version": "1.9.0"}))
            return Launched([], [SimpleNamespace(start_s=0.0, wall_s=1.0, warning=None)], {"python": build.python})

    result = run_stage.run_one(run, DagRunFolder(tmp_path),
                               {"dir": str(tmp_path / "data"), "records": {"train": 10_000}}, 60,
                               lambda name: Records())
    assert result["status"] == "ok"
    assert seen == [RunBuild("mxnet==1.9.0", "1.9.0", (), "/envs/190/bin/python")]


def test_a_run_whose_trainer_imported_another_mxnet_fails_by_name(tmp_path, monkeypatch):
    (run,) = expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]},
                         {"local": Target("local", 1, 0, one_machine=True)})
    run = {**run, "build": {"package": "mxnet==1.9.0", "version": "1.9.0", "python": "/envs/190/bin/python"}}

    class ImportsAnother:
        def reap(self, run_folder):
            return []

        def execute(self, variant, data_dir, run_folder, deadline_s, build=None):
            assert build == RunBuild("mxnet==1.9.0", "1.9.0", (), "/envs/190/bin/python")  # an input, as asked
            (run_folder.path / "rank0.log").write_text(
                format_event("run_start", environment={"mxnet_version": "1.9.1"}))
            return Launched([], [], {"python": "/usr/bin/python3"})

    with pytest.raises(run_stage.RunFailed) as failed:
        run_stage.run_one(run, DagRunFolder(tmp_path), {"dir": str(tmp_path / "data"), "records": {"train": 10_000}},
                          60,
                          lambda name: ImportsAnother())
    assert str(failed.value) == (f"run {run['key']} failed: it asked for MXNet build mxnet==1.9.0, but its trainer "
                                 "imported MXNet 1.9.1 (/usr/bin/python3): not kept as mxnet==1.9.0")
    meta = json.loads((tmp_path / run["key"] / "meta.json").read_text())
    assert meta["status"] == "failed"
    assert meta["build"] == {"asked": "mxnet==1.9.0", "reported": "1.9.1", "python": "/usr/bin/python3", "image": None}
