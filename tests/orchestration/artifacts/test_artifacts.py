"""The artifact store (mxbench.artifacts): units published file by file with their manifest last,
read only as a manifest lists them; DAG run folders per task; prepared data fetched once per
worker. On a file:// store that is not MXBENCH_HOME and on a real S3 API (moto's server on
loopback, through an Airflow aws connection)."""
import json
from pathlib import Path

import pytest

from mxbench import artifacts, config
from mxbench.run_folder import RunFolder
from mxbench_train.errors import MxbenchError


@pytest.fixture(params=["file", "s3"])
def store(request, tmp_path, monkeypatch):
    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path / "home"))
    if request.param == "file":
        url = f"file://{tmp_path / 'published'}"
    else:
        server = request.getfixturevalue("s3")
        for key, value in server.connection().items():
            monkeypatch.setenv(key, value)
        url = f"s3://mxbench_artifacts@bench/{tmp_path.name}"
    monkeypatch.setenv("MXBENCH_ARTIFACTS", url)
    return artifacts.Store()


def make_files(folder: Path, files: dict) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def test_default_store_is_this_machines_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path))
    monkeypatch.delenv("MXBENCH_ARTIFACTS", raising=False)
    store = artifacts.Store()
    assert store.is_home and store.url == f"file://{tmp_path}"
    with artifacts.dag_run("mxbench_benchmark", "r1", "report") as dag_folder:
        folder = dag_folder.path
        assert folder == config.dag_run_dir("mxbench_benchmark", "r1")  # worked in place: nothing copied
    assert not (tmp_path / "scratch").exists()


def test_a_unit_is_read_only_as_its_manifest_lists_it(store, tmp_path):
    local = tmp_path / "out"
    make_files(local, {"k/meta.json": '{"status": "ok"}', "k/rank0.log": "speed", "attempts/k.1/rank0.log": "old"})
    assert store.fetch("runs/x", tmp_path / "in", "k") is None  # not published: not finished
    manifest = store.publish("runs/x", local, "k", ["k/meta.json", "k/rank0.log", "attempts/k.1/rank0.log"])
    assert manifest["files"]["k/rank0.log"]["size"] == 5
    got = store.fetch("runs/x", tmp_path / "in", "k")
    assert got["files"] == manifest["files"] and (tmp_path / "in" / "attempts/k.1/rank0.log").read_text() == "old"
    # a file swapped under the manifest is refused, never read as the run's
    store.write_bytes("runs/x/k/rank0.log", b"other")
    (tmp_path / "in" / "k/rank0.log").unlink()
    with pytest.raises(MxbenchError, match="does not match its manifest"):
        store.fetch("runs/x", tmp_path / "in", "k")
    # republishing (a retry) with fewer files removes the ones no longer listed: nothing stale
    (local / "k/rank0.log").write_text("speed, again")
    store.publish("runs/x", local, "k", ["k/meta.json", "k/rank0.log"])
    assert store.read_bytes("runs/x/attempts/k.1/rank0.log") is None
    assert store.fetch("runs/x", tmp_path / "in", "k") and (tmp_path / "in/k/rank0.log").read_text() == "speed, again"


def test_only_fetches_the_files_named(store, tmp_path):
    make_files(tmp_path / "out", {"k/meta.json": "{}", "k/rank0.log": "x" * 1000})
    store.publish("runs/y", tmp_path / "out", "k", ["k/meta.json", "k/rank0.log"])
    store.fetch("runs/y", tmp_path / "in", "k", only=["meta.json"])
    assert (tmp_path / "in/k/meta.json").is_file() and not (tmp_path / "in/k/rank0.log").exists()


def test_a_store_naming_a_missing_connection_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("MXBENCH_ARTIFACTS", "s3://no_such_conn@bench/x")
    with pytest.raises(MxbenchError, match="names the Airflow connection 'no_such_conn'"):
        artifacts.Store()


def test_a_scheme_without_its_provider_is_named(monkeypatch):
    monkeypatch.setenv("MXBENCH_ARTIFACTS", "nosuchfs://bucket/x")
    with pytest.raises(MxbenchError,
                       match=r"artifact store nosuchfs://bucket/x \(MXBENCH_ARTIFACTS\) cannot be opened"):
        artifacts.Store()


def test_a_task_works_in_scratch_and_publishes_what_it_wrote(store, tmp_path):
    with artifacts.dag_run("d", "r", "expand_variants", store=store) as dag_folder:
        folder = dag_folder.path
        assert folder.name == config.dag_run_dir("d", "r").name  # as the DAG run's folder is called
        assert config.home() / "scratch" in folder.parents
        (folder / "request.json").write_text(json.dumps({"dag_id": "d", "runs": [{"key": "a"}, {"key": "b"}]}))
    with artifacts.run_folder("d", "r", "a", extra={"worker": "w1"}, store=store) as space:
        folder = space.folder.path
        assert json.loads((folder / "request.json").read_text())["runs"][0]["key"] == "a"
        make_files(folder, {"a/meta.json": '{"status": "ok"}', "a/rank0.log": "log"})
    assert not (config.home() / "scratch").exists() or not any((config.home() / "scratch").iterdir())
    name = f"runs/{artifacts.dag_run_name('d', 'r')}"
    assert store.manifest(name, "a")["worker"] == "w1"
    # a later task reads both the run (all of it, or some files) and writes tables
    with artifacts.dag_run("d", "r", "parse_logs", all_units=True, store=store) as dag_folder:
        folder = dag_folder.path
        assert (folder / "a/rank0.log").read_text() == "log" and not (folder / "b").exists()
        make_files(folder, {"tables/runs.csv": "key\na\n", "a/metrics.json": "{}"})
    assert set(store.manifest(name, "a")["files"]) == {"a/meta.json", "a/rank0.log", "a/metrics.json"}
    with artifacts.dag_run("d", "r", "report", tables=True, all_units=True, unit_files=["meta.json"],
                           store=store) as dag_folder:
        folder = dag_folder.path
        assert (folder / "tables/runs.csv").read_text() == "key\na\n"
        assert (folder / "a/meta.json").is_file() and not (folder / "a/rank0.log").exists()
        make_files(folder, {"report/report.html": "<p>report</p>", "report/report.md": "# r"})
    assert artifacts.read_report("d", "r", store) == b"<p>report</p>"
    # another DAG's run of the same id has its own folder: no report there
    assert artifacts.read_report("other_dag", "r", store) is None


def test_a_failed_task_still_publishes_and_raises_its_own_error(store):
    with pytest.raises(RuntimeError, match="the stage broke"):
        with artifacts.dag_run("d", "r2", "expand_variants", store=store) as dag_folder:
            folder = dag_folder.path
            (folder / "stages.json").write_text('{"expand": "expanding the variants failed: x"}')
            raise RuntimeError("the stage broke")
    with artifacts.dag_run("d", "r2", "parse_logs", store=store) as dag_folder:
        folder = dag_folder.path
        assert "expanding the variants failed" in (folder / "stages.json").read_text()


def test_a_run_killed_before_it_published_is_found_on_its_worker(store):
    """Its task was SIGKILLed: nothing in the store, but its scratch on this worker says it ran;
    parsing takes it from there (and publishes it), so that it is reaped and named."""
    with artifacts.dag_run("d", "r3", "expand_variants", store=store) as dag_folder:
        folder = dag_folder.path
        (folder / "request.json").write_text(json.dumps({"runs": [{"key": "a"}]}))
    killed = artifacts.run_scratch(artifacts.dag_run_name("d", "r3"), "a")
    make_files(killed, {"a/meta.json": '{"status": "running"}', "a/pids.json": "[]"})
    with artifacts.dag_run("d", "r3", "parse_logs", all_units=True, store=store) as dag_folder:
        folder = dag_folder.path
        assert json.loads((folder / "a/meta.json").read_text())["status"] == "running"
    assert "a/pids.json" in store.manifest(f"runs/{artifacts.dag_run_name('d', 'r3')}", "a")["files"]


def test_prepared_data_is_fetched_once_per_worker(store, tmp_path, monkeypatch):
    made = tmp_path / "worker-a" / "rec-abc"
    make_files(made, {"train.rec": "r" * 100, "train.idx": "0\t0\n", "manifest.json": "{}", "work.lst": "x",
                      ".lock": ""})
    data = {"dir": str(made), "name": "rec-abc", "records": {"train": 1}}
    artifacts.publish_data(data, store)
    assert set(store.manifest("data", "rec-abc")["files"]) == {"rec-abc/train.rec", "rec-abc/train.idx",
                                                                "rec-abc/manifest.json"}
    gets = []
    real_get = artifacts.Store.get
    monkeypatch.setattr(artifacts.Store, "get", lambda self, pairs: (gets.append(len(pairs)), real_get(self, pairs)))
    here = artifacts.local_data(data, tmp_path / "worker-b", store)
    assert Path(here["dir"]) == tmp_path / "worker-b" / "rec-abc" and gets == [3]
    assert (Path(here["dir"]) / "train.rec").read_text() == "r" * 100
    artifacts.local_data(data, tmp_path / "worker-b", store)
    assert gets == [3]  # a cache hit downloads nothing
    (Path(here["dir"]) / "train.rec").write_text("short")  # a damaged cache is fetched again
    artifacts.local_data(data, tmp_path / "worker-b", store)
    assert gets == [3, 1] and (Path(here["dir"]) / "train.rec").read_text() == "r" * 100  # that file only


def test_data_not_in_the_store_names_the_cause(store, tmp_path):
    with pytest.raises(MxbenchError, match="rec-missing is not in the artifact store"):
        artifacts.local_data({"dir": "/elsewhere/rec-missing", "name": "rec-missing"}, tmp_path, store)


def test_s3_objects_are_where_the_layout_says(s3, tmp_path, monkeypatch):
    for key, value in s3.connection().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path))
    store = artifacts.Store("s3://mxbench_artifacts@bench/layout")
    make_files(tmp_path / "out", {"k/meta.json": "{}"})
    store.publish("runs/x", tmp_path / "out", "k", ["k/meta.json"])
    assert sorted(s3.keys("bench", "layout/")) == ["layout/runs/x/k/meta.json", "layout/runs/x/manifests/k.json"]


def test_a_run_folder_from_another_machine_never_signals_pids_here(tmp_path):
    """A failed attempt's folder fetched from the store names another worker's processes: the
    local launcher reaps only what it started on this machine (host name and boot id)."""
    import subprocess

    from mxbench.launchers.local import LocalLauncher
    from mxbench_train.localhost import pid_scope, start_ticks

    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "pids.json").write_text(json.dumps({"worker-0": {"pid": victim.pid,
                                                                    "start": start_ticks(victim.pid)}}))
        (run_dir / "meta.json").write_text(json.dumps({"machine": "other-worker/0000"}))
        assert LocalLauncher().reap(RunFolder(run_dir)) == [] and victim.poll() is None
        (run_dir / "meta.json").write_text(json.dumps({"machine": pid_scope()}))
        assert LocalLauncher().reap(RunFolder(run_dir)) == [("worker-0", victim.pid)]
        assert victim.wait(timeout=10) == -9
    finally:
        victim.kill()
        victim.wait()


def test_mxbench_fetch_copies_a_published_dag_run_out(store, tmp_path, capsys):
    from mxbench.cli import main

    with artifacts.dag_run("d", "r9", "expand_variants", store=store) as dag_folder:
        folder = dag_folder.path
        (folder / "request.json").write_text(json.dumps({"dag_id": "d", "runs": [{"key": "a"}, {"key": "b"}]}))
    with artifacts.run_folder("d", "r9", "a", store=store) as space:
        make_files(space.folder.path, {"a/meta.json": '{"status": "ok"}'})
    assert main(["fetch", "d", "r9", "--to", str(tmp_path / "copy")]) == 0
    out = capsys.readouterr().out
    copy = tmp_path / "copy" / artifacts.dag_run_name("d", "r9")
    assert str(copy) in out and "run b was never published" in out
    assert json.loads((copy / "a/meta.json").read_text())["status"] == "ok"
    assert main(["fetch", "d", "no-such-run", "--to", str(tmp_path / "copy")]) == 1
    assert "has no DAG run no-such-run of d" in capsys.readouterr().err


def test_a_task_that_read_part_of_a_run_keeps_the_rest_when_it_writes_there(store):
    with artifacts.dag_run("d", "r5", "expand_variants", store=store) as dag_folder:
        folder = dag_folder.path
        (folder / "request.json").write_text(json.dumps({"dag_id": "d", "runs": [{"key": "a"}]}))
    with artifacts.run_folder("d", "r5", "a", store=store) as space:
        make_files(space.folder.path, {"a/meta.json": '{"status": "ok"}', "a/rank0.log": "log"})
    with artifacts.dag_run("d", "r5", "store_results", all_units=True, unit_files=["meta.json"],
                           store=store) as dag_folder:
        folder = dag_folder.path
        make_files(folder, {"a/meta.json": '{"status": "ok", "stored": true}', "a/extra.json": "{}"})
    with artifacts.dag_run("d", "r5", "parse_logs", all_units=True, store=store) as dag_folder:
        folder = dag_folder.path
        assert (folder / "a/rank0.log").read_text() == "log"  # kept, though that task never had it
        assert json.loads((folder / "a/meta.json").read_text())["stored"] is True
        assert (folder / "a/extra.json").is_file()


def expanded(store, run_id: str, keys=("a",)) -> str:
    with artifacts.dag_run("d", run_id, "expand_variants", store=store) as dag_folder:
        folder = dag_folder.path
        (folder / "request.json").write_text(json.dumps({"dag_id": "d", "runs": [{"key": k} for k in keys]}))
    return f"runs/{artifacts.dag_run_name('d', run_id)}"


def test_a_republish_cut_short_leaves_the_published_unit_whole(store, monkeypatch):
    """A retry's publish that dies after its first upload (an S3 error, the SIGKILL after SIGTERM)
    never touches an object the live manifest lists: readers still get the earlier try."""
    folder = expanded(store, "r6")
    with artifacts.run_folder("d", "r6", "a", extra={"try_number": 1}, store=store) as space:
        make_files(space.folder.path, {"a/meta.json": '{"status": "failed"}', "a/rank0.log": "try 1"})

    def cut(self, pairs):
        raise ConnectionError("the store went away")

    monkeypatch.setattr(artifacts.Store, "put", cut)
    with pytest.raises(MxbenchError, match="publishing to the artifact store .* failed: ConnectionError"):
        with artifacts.run_folder("d", "r6", "a", extra={"try_number": 2}, store=store) as space:
            make_files(space.folder.path, {"a/meta.json": '{"status": "ok"}', "a/rank0.log": "try 2"})
    monkeypatch.undo()
    with artifacts.dag_run("d", "r6", "parse_logs", all_units=True, store=store) as dag_folder:
        folder_here = dag_folder.path
        assert (folder_here / "a/rank0.log").read_text() == "try 1"  # whole, and readable
    assert store.manifest(folder, "a")["try_number"] == 1


def test_a_retry_on_the_worker_whose_publish_failed_keeps_that_try(store, monkeypatch):
    """Try 2 measured but could not publish (its scratch kept); try 3 on the same worker finds
    it newer than the store's try 1 and uses it: nothing measured twice, nothing buried."""
    folder = expanded(store, "r7")
    with artifacts.run_folder("d", "r7", "a", extra={"try_number": 1}, store=store) as space:
        make_files(space.folder.path, {"a/meta.json": '{"status": "failed", "try_number": 1}'})
    real_publish = artifacts.Workspace.publish
    monkeypatch.setattr(artifacts.Workspace, "publish", lambda self, extra=None: (_ for _ in ()).throw(OSError("down")))
    with pytest.raises(MxbenchError):
        with artifacts.run_folder("d", "r7", "a", extra={"try_number": 2}, store=store, every_s=3600) as space:
            make_files(space.folder.path, {"a/meta.json": '{"status": "ok", "try_number": 2}'})
    monkeypatch.setattr(artifacts.Workspace, "publish", real_publish)
    with artifacts.run_folder("d", "r7", "a", extra={"try_number": 3}, store=store) as space:
        assert json.loads((space.folder.path / "a/meta.json").read_text())["status"] == "ok" and space.aside is None
    assert store.manifest(folder, "a")["try_number"] == 3
    with artifacts.dag_run("d", "r7", "parse_logs", all_units=True, store=store) as dag_folder:
        here = dag_folder.path
        assert json.loads((here / "a/meta.json").read_text()) == {"status": "ok", "try_number": 2}


def test_a_stale_try_never_publishes_over_a_later_one(store):
    folder = expanded(store, "r8")
    with artifacts.run_folder("d", "r8", "a", extra={"try_number": 2}, store=store) as space:
        make_files(space.folder.path, {"a/meta.json": '{"status": "ok"}'})
    stale = artifacts.Workspace(store, artifacts.dag_run_name("d", "r8"), config.home() / "stale")
    make_files(stale.path, {"a/meta.json": '{"status": "failed"}'})
    with pytest.raises(MxbenchError, match="try 2 .* published it after this try 1 began"):
        stale.publish({"a": {"try_number": 1}})
    assert json.loads(store.read_bytes(f"{folder}/a/meta.json")) == {"status": "ok"}


def test_a_run_is_published_while_it_runs(store):
    """So that a retry on another worker finds what a lost try started (and reaps it)."""
    import time

    folder = expanded(store, "r10")
    with artifacts.run_folder("d", "r10", "a", extra={"try_number": 1}, store=store, every_s=0.2) as space:
        make_files(space.folder.path, {"a/meta.json": '{"status": "running"}', "a/remote.json": "[]"})
        deadline = time.monotonic() + 10
        while store.manifest(folder, "a") is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert set(store.manifest(folder, "a")["files"]) == {"a/meta.json", "a/remote.json"}
        make_files(space.folder.path, {"a/meta.json": '{"status": "ok"}'})
    assert json.loads(store.read_bytes(f"{folder}/" + artifacts.object_of(
        "a/meta.json", store.manifest(folder, "a")["files"]["a/meta.json"]))) == {"status": "ok"}


def test_a_store_url_with_a_password_is_refused_without_echoing_it(monkeypatch):
    monkeypatch.setenv("MXBENCH_ARTIFACTS", "s3://AKIAEXAMPLE:s3cr3t@bench/x")
    with pytest.raises(MxbenchError) as caught:
        artifacts.Store()
    assert "s3cr3t" not in str(caught.value) and "AKIAEXAMPLE" not in str(caught.value)
    assert "name an Airflow connection instead" in str(caught.value)
