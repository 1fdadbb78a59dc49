"""A hostile pod against the Kubernetes launcher, on the loopback stand-in (standins.kube).

The pod's "python" is tests/fixtures/bin/python-hostile-pod: it trains nothing and prints a
crafted outputs block (names aimed at the launcher's records and outside the run folder), a
block that expands 1000:1, an endless log line, or a line that never ends. The launcher must
keep its records, write nothing outside the run folder, hold every cap, and fail the run naming
the pod and the cause.
"""
import json
import threading
import time
from pathlib import Path

import pytest

from conftest import core_api, pods_left
from mxbench.launchers.kubernetes import role_pods
from mxbench.launchers.kubernetes.kubernetes_launcher import KubernetesLauncher
from mxbench.launchers.kubernetes.pods import pod_settings
from mxbench.matrix.variants import Variant
from mxbench.run_folder import RunFolder
from mxbench_train.errors import MxbenchError
from mxbench_train.plan_runner import LaunchTimeout
from mxbench_train.role_log import ECHO_LINE_CHARS, MAX_LINE_BYTES

HOSTILE_PYTHON = Path(__file__).parents[2] / "fixtures" / "bin" / "python-hostile-pod"
ROLE_LOG_CAP = 512 << 10
ONE_WORKER = Variant("cpu1-bs64", "1 worker", 64, num_layers=8, epochs=1)


def run_hostile(standin, tmp_path, mode, deadline_s=120, on_pods=None):
    """Run the one-worker variant as a pod whose python is hostile in ``mode``; (run folder, outcome)."""
    data = tmp_path / "data"
    (data / "rec").mkdir(parents=True)
    settings = pod_settings("mxbench_kubernetes", {"mxbench_pod": {
        "image": "mxbench-standin", "python": str(HOSTILE_PYTHON), "data": {"host_path": str(data)},
        "env": {"MXBENCH_HOSTILE": mode}}}, namespace="mxbench")
    run_dir = tmp_path / "dag-run" / "cpu1-bs64__kubernetes__r1"
    run_dir.mkdir(parents=True)
    (run_dir / "meta.json").write_text('{"status": "running"}')  # as the pipeline writes it first
    try:
        launcher = KubernetesLauncher(settings, core_api(standin), on_pods=on_pods)
        outcome = launcher.execute(ONE_WORKER, data / "rec", RunFolder(run_dir), deadline_s=deadline_s)
    except MxbenchError as exc:
        outcome = exc
    assert pods_left(standin) == []
    return run_dir, outcome


@pytest.fixture
def small_role_logs(monkeypatch):
    monkeypatch.setenv("MXBENCH_ROLE_LOG_MAX_BYTES", str(ROLE_LOG_CAP))


def assert_capped(log: Path):
    text = log.read_bytes()
    assert len(text) <= ROLE_LOG_CAP + 300, len(text)  # head + tail + the one marker line
    assert b"bytes of this log were dropped here" in text
    return text


def test_outputs_aimed_at_the_launchers_records_or_outside_the_run_folder_fail_the_run(kube_standin, tmp_path):
    run_dir, outcome = run_hostile(kube_standin, tmp_path, "names")
    assert isinstance(outcome, MxbenchError) and not isinstance(outcome, LaunchTimeout), outcome
    message = str(outcome)
    assert message.startswith("role worker-0: the outputs of pod mxb-") and "-worker-0: files of the outputs were " \
        "refused: './meta.json' would overwrite the launcher's own records; 'x/../pids.json' would overwrite the " \
        "launcher's own records; '../escape' leaves the run folder (and 3 more)" in message
    assert json.loads((run_dir / "meta.json").read_text()) == {"status": "running"}
    assert list(json.loads((run_dir / "pids.json").read_text())) == ["worker-0"]  # the launcher's, not "{}"
    assert "forged" not in (run_dir / "roles" / "worker-0.log").read_text()
    assert (run_dir / "rank0.log").is_file()  # what was fine still came back
    assert sorted(p.name for p in run_dir.parent.iterdir()) == ["cpu1-bs64__kubernetes__r1"]
    assert not Path("/tmp/mxbench-hostile-absolute").exists() and not (run_dir / "link").exists()


def test_outputs_that_expand_1000_to_1_are_refused_while_unpacking(kube_standin, tmp_path):
    run_dir, outcome = run_hostile(kube_standin, tmp_path, "bomb")
    assert isinstance(outcome, MxbenchError), outcome
    assert "the outputs of pod mxb-" in str(outcome) and "the outputs expand past 268435456 bytes" in str(outcome)
    assert sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file()) < 1 << 20


def test_an_endless_line_is_capped_and_the_outputs_block_at_the_end_still_comes_back(kube_standin, tmp_path,
                                                                                   small_role_logs, capfd):
    run_dir, outcome = run_hostile(kube_standin, tmp_path, "endless")
    assert not isinstance(outcome, Exception), outcome
    text = assert_capped(run_dir / "roles" / "worker-0.log")
    assert text.startswith(b"hostile pod: endless\nxxxx") and text.endswith(b"xxxx\nthe last line before the block\n")
    assert b"mxbench outputs" not in text
    assert "Speed: 100.0" in (run_dir / "rank0.log").read_text()  # unpacked from behind 8 MiB of log
    out, _ = capfd.readouterr()
    # cut, saying so
    assert max(map(len, out.splitlines())) <= len("[worker-0@standin-node-1] ") + ECHO_LINE_CHARS + 100


def test_a_log_past_the_fetch_limit_is_read_no_further(kube_standin, tmp_path, small_role_logs, monkeypatch, capfd):
    monkeypatch.setattr(role_pods, "FETCH_MAX_BYTES", 2 << 20)
    run_dir, outcome = run_hostile(kube_standin, tmp_path, "endless")
    assert not isinstance(outcome, Exception), outcome
    _, err = capfd.readouterr()
    assert f"its log is over {2 << 20} bytes; read no further (its outputs block, at the end, is lost)" in err
    assert not (run_dir / "rank0.log").exists()
    assert_capped(run_dir / "roles" / "worker-0.log")  # the streamed one stays


def test_a_line_that_never_ends_is_streamed_within_the_cap(kube_standin, tmp_path, small_role_logs, capfd):
    # stopped as the operator's on_kill stops a run (its pods deleted), once the task log has taken
    # all it takes from the role: by then the role log has had many times its cap (a fixed deadline
    # would count the pod's start too, and on loaded cores end the run before that)
    role_log = tmp_path / "dag-run" / "cpu1-bs64__kubernetes__r1" / "roles" / "worker-0.log"
    run_pods, echoed = [], []

    def stop_once_the_echo_points_to_the_role_log():
        until = time.monotonic() + 240
        while str(role_log) not in "".join(echoed) and time.monotonic() < until:
            time.sleep(0.2)
            echoed.append(capfd.readouterr().out)
        run_pods[0].delete_all()

    stopper = threading.Thread(target=stop_once_the_echo_points_to_the_role_log)
    run_dir, outcome = run_hostile(kube_standin, tmp_path, "forever", deadline_s=300,
                                   on_pods=lambda pods: (run_pods.append(pods), stopper.start()))
    stopper.join()
    assert isinstance(outcome, MxbenchError) and not isinstance(outcome, LaunchTimeout), outcome
    assert "worker-0" in str(outcome)
    out = "".join(echoed) + capfd.readouterr().out
    assert len(out) < ROLE_LOG_CAP  # the task log got half the cap at most, then a pointer to the role log
    last = out.splitlines()[-1]
    assert last.startswith("[worker-0@") and str(role_log) in last
    text = assert_capped(role_log)
    # the line comes in pieces of MAX_LINE_BYTES, each a line of the log
    assert text.startswith(b"hostile pod: forever\nyyyy") and text.endswith(b"yyyy\n")
    assert max(map(len, text.split(b"\n"))) <= MAX_LINE_BYTES


# --- a commit's build through expand -> run -> the Kubernetes launcher --------------------------

def image_folder(path: Path, commit=None) -> str:
    """A folder standing for a training image on the stand-in (its bin/ goes first on the pod's
    PATH): its python is the training env's; a source build's image names its commit
    (docker/train-source.Dockerfile sets MXBENCH_MXNET_COMMIT), a release's names none."""
    from conftest import train_python

    (path / "bin").mkdir(parents=True)
    named = f"export MXBENCH_MXNET_COMMIT={commit}\n" if commit else ""
    (path / "bin" / "python").write_text(f"#!/bin/sh\n{named}exec {train_python()} \"$@\"\n")
    (path / "bin" / "python").chmod(0o755)
    return str(path)


@pytest.mark.slow  # two runs that train for real, as pods on the stand-in
def test_a_commit_build_through_expand_runs_the_commits_image_or_is_refused(kube_standin, tmp_path):
    """The regression DAG's path: resolve_build's record of a source-only commit of 1.9.1 goes
    through expand into each run, and its pods run the commit's image, not release 1.9.1's; an
    image keyed by the commit whose trainer names no commit (a release's) is not kept."""
    from mxbench.builds.record import RunBuild
    from mxbench.run_folder import DagRunFolder, read_json
    from mxbench.stages import pipeline, run_stage

    data_root = tmp_path / "data"
    params = {"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"], "launchers": ["kubernetes"],
              "epochs": 1, "synthetic_images": 500}
    build = RunBuild("mxnet==1.9.1", "1.9.1", image="mxbench-train:src-1234567", commit="1234567").to_dict()
    commit_image = image_folder(tmp_path / "src-1234567", commit="1234567")
    release_image = image_folder(tmp_path / "release-1.9.1")

    def run_through_the_stages(images, name):
        settings = pod_settings("mxbench_kubernetes", {"mxbench_pod": {
            "image": release_image, "python": "python", "data": {"host_path": str(data_root)},
            "images": images}}, namespace="mxbench")
        launcher_for = {"kubernetes": KubernetesLauncher(settings, core_api(kube_standin))}.get
        dag_dir = tmp_path / name
        targets, unavailable = pipeline.targets_for(["kubernetes"], launcher_for)
        refused = pipeline.prepare_builds(["kubernetes"], targets, unavailable, build, launcher_for)
        assert refused == {} and unavailable == {}
        (run,) = pipeline.expand(params, DagRunFolder(dag_dir), targets, unavailable, build, refused=refused)
        data = pipeline.prepare_data(params, DagRunFolder(dag_dir), data_root)
        try:
            run_stage.run_one(run, DagRunFolder(dag_dir), data, 600, launcher_for)
        except run_stage.RunFailed:
            pass
        return read_json(DagRunFolder(dag_dir).run(run["key"]).meta), run

    # the connection has the release's image and the commit's: the commit's runs
    meta, run = run_through_the_stages({"1.9.1": release_image, "mxnet==1.9.1": release_image,
                                        "1234567": commit_image}, "by-commit")
    assert meta["build"]["image"] == commit_image, meta["build"]
    assert meta["status"] == "ok" and meta["build"]["commit"] == "1234567", meta["cause"]
    assert run["build"]["commit"] == "1234567"  # every field of the build travels with the run
    # an image keyed by the commit whose trainer names no commit: a release's MXNet, not kept
    meta, run = run_through_the_stages({"1.9.1": release_image, "1234567": release_image}, "by-release")
    assert meta["status"] == "failed"
    assert meta["cause"] == (f"it asked for MXNet build mxnet==1.9.1 (commit 1234567), but its trainer imported "
                             f"MXNet 1.9.1, which names no commit ({release_image}): not kept as mxnet==1.9.1")
    assert pods_left(kube_standin) == []
