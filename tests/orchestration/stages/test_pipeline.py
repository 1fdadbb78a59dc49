"""Pipeline stages on their own: failed runs keep their record, nothing is lost, bad data is named."""
import hashlib
import json
import re
from dataclasses import asdict

import pytest

from mxbench.matrix.variants import Target, expand_runs, preset
from mxbench.run_folder import DagRunFolder, RunFolder, write_json
from mxbench.stages import pipeline, run_stage
from mxbench.stages.dag_run_failures import failed_runs, failure_message
from mxbench_train.errors import MxbenchError
from mxbench_train.localhost import start_ticks

TARGETS = {"local": Target("local", 1, 0)}


def test_run_without_enough_data_fails_fast_and_a_retry_keeps_the_failed_attempt(tmp_path):
    (run,) = [r for r in expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu4w-bs64"]},
                                     TARGETS)]
    data = {"dir": str(tmp_path / "data"), "records": {"train": 1000}}
    for _attempt in (1, 2):
        with pytest.raises(run_stage.RunFailed, match="run cpu4w-bs64__local__r1 failed: each of its 4 workers "
                                                      "gets 3 batches of 64"):
            run_stage.run_one(run, DagRunFolder(tmp_path), data, deadline_s=60)
    meta = json.loads((tmp_path / run["key"] / "meta.json").read_text())
    assert meta["status"] == "failed" and "no speed would be measured" in meta["cause"]
    kept = json.loads((tmp_path / "attempts" / f"{run['key']}.1" / "meta.json").read_text())
    assert kept["status"] == "failed" and kept["started_at"] < meta["started_at"]


def test_parse_lists_runs_that_never_started(tmp_path):
    pipeline.expand({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]}, DagRunFolder(tmp_path),
                    TARGETS)
    pipeline.parse_all(DagRunFolder(tmp_path))
    pipeline.join(DagRunFolder(tmp_path))
    assert failed_runs(DagRunFolder(tmp_path)) == [{"key": "cpu1-bs32__local__r1", "status": "not run",
                                            "cause": "the run never started (an upstream task failed)"}]


def test_parse_all_refuses_a_folder_that_is_not_a_benchmark_run(tmp_path):
    with pytest.raises(MxbenchError, match="has no request.json"):
        pipeline.parse_all(DagRunFolder(tmp_path))


def test_missing_dataset_is_a_named_error(tmp_path):
    missing = tmp_path / "data" / "cifar.tar.gz"  # in the data folder: a path elsewhere is refused unread
    with pytest.raises(MxbenchError, match=f"data preparation failed: CIFAR-10 source {missing} does not exist"):
        pipeline.prepare_data({"dataset": str(missing)}, DagRunFolder(tmp_path / "run"), tmp_path / "data")


def test_variant_round_trips_through_the_run_dict():
    from mxbench.matrix.variants import variant_from_dict

    for variant in preset("seed"):
        assert variant_from_dict(asdict(variant)) == variant


def test_a_variant_becomes_one_trainer_command_line_and_a_role_plan():
    from mxbench.matrix.jobs import job_for
    from mxbench_train.role_plan import plan_roles

    two_hosts = preset("seed")[-1]
    job = job_for(two_hosts, data_dir="/data", log_dir="/runs/x", python="/opt/train/bin/python",
                  hosts=("gpu-a", "gpu-b", "gpu-c"), port=9000, cores_per_host=16)
    plan = plan_roles(job)
    workers = [r for r in plan if r.kind == "worker"]
    assert [w.host for w in workers] == ["gpu-a", "gpu-b"]  # the variant takes 2 of the 3 hosts
    argv = workers[0].argv
    assert argv[:4] == ("/opt/train/bin/python", "-m", "mxbench_train", "train")
    flags = dict(zip(argv[4::2], argv[5::2]))
    assert flags == {"--num-layers": "110", "--kv-store": "dist_sync", "--batch-size": "512", "--num-epochs": "300",
                     "--disp-batches": "20", "--data-train": "/data/cifar10_train.rec",
                     "--data-val": "/data/cifar10_val.rec", "--log-dir": "/runs/x", "--gpus": "0,1,2,3"}
    assert workers[0].argv == workers[1].argv and workers[0].env["DMLC_NUM_WORKER"] == "2"


def test_gpu_usage_of_a_run_from_its_telemetry_csv(tmp_path):
    header = "timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]\n"
    (tmp_path / "gpu-rank0.csv").write_text(header + "".join(
        f"2026/12/02 10:00:0{i}.000, {g}, Tesla V100, {u} %, {m} MiB, 16160 MiB\n"
        for i, (g, u, m) in enumerate([(0, 90, 1455), (1, 80, 1466), (0, 70, 1460), (1, 100, 1470)])))
    assert pipeline.gpu_usage(RunFolder(tmp_path)) == {"gpu_util_pct": 85.0, "gpu_mem_mib": 1470.0}
    assert pipeline.gpu_usage(RunFolder(tmp_path / "none")) == {"gpu_util_pct": None, "gpu_mem_mib": None}


def test_run_folders_of_different_dag_run_ids_never_collide(monkeypatch, tmp_path):
    from mxbench import config

    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path))
    ids = ["manual__2026-12-02T10:00:00+00:00", "a:b", "a+b", "a_b", "a b", "../../etc", "a" * 300, "a" * 301]
    # run ids are unique per DAG only: a manual run of the benchmark DAG may take the regression DAG's id
    runs = [(dag, i) for dag in ("mxbench_benchmark", "mxbench_regression") for i in ids]
    runs += [("mxbench_benchmark.a", "b"), ("mxbench_benchmark", "a.b"), ("x" * 200, "r"), ("x" * 201, "r")]
    folders = [config.dag_run_dir(dag, i) for dag, i in runs]
    assert len(set(folders)) == len(runs)
    assert all(f.parent == tmp_path / "runs" and len(f.name) < 255 for f in folders)  # NAME_MAX
    # the whole SHA-256 of the pair, not a few bits of it
    assert all(re.fullmatch(r"[0-9a-f]{64}", f.name.rsplit("-", 1)[1]) for f in folders)
    assert config.dag_run_dir("d", "a:b") == config.dag_run_dir("d", "a:b")  # stable: a retry finds its folder


def test_a_folder_under_the_old_name_is_still_found_by_readers(monkeypatch, tmp_path):
    from mxbench import config

    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path))
    run_id = "manual__2026-10-01T00:00:00+00:00"
    # the name folders got before they were keyed by DAG: the run id made safe, 32 bits of its hash
    old = tmp_path / "runs" / f"manual__2026-10-01T00_00_00_00_00-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"
    assert config.legacy_dag_run_dir(run_id) == old
    assert config.existing_dag_run_dir("mxbench_benchmark", run_id) == config.dag_run_dir("mxbench_benchmark", run_id)
    old.mkdir(parents=True)  # written before request.json named its DAG: no DAG's, never handed out
    assert config.existing_dag_run_dir("mxbench_benchmark", run_id) == config.dag_run_dir("mxbench_benchmark", run_id)
    (old / "request.json").write_text('{"dag_id": "mxbench_regression"}')  # another DAG's: not this one's
    assert config.existing_dag_run_dir("mxbench_benchmark", run_id) == config.dag_run_dir("mxbench_benchmark", run_id)
    assert config.existing_dag_run_dir("mxbench_regression", run_id) == old
    new = config.dag_run_dir("mxbench_regression", run_id)
    new.mkdir()
    assert config.existing_dag_run_dir("mxbench_regression", run_id) == new  # the new name wins


def test_an_old_folder_that_names_no_dag_is_neither_written_nor_served_for_a_dag_that_picks_its_run_id(
        monkeypatch, tmp_path):
    """The attack: a trigger user of mxbench_benchmark picks the run id of the regression DAG's old
    folder (written before request.json named its DAG) to write into it and be served its report."""
    from mxbench import config
    from mxbench.airflow_glue.web_folders import report_file

    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path))
    run_id = "scheduled__2026-10-01T00:00:00+00:00"
    old = config.legacy_dag_run_dir(run_id)
    (old / "report").mkdir(parents=True)
    (old / "request.json").write_text('{"params": {}, "runs": []}')  # no dag_id: as written then
    (old / "report" / "report.html").write_text("<html>the regression DAG's</html>")
    before = sorted(p.relative_to(old) for p in old.rglob("*"))
    for dag_id in ("mxbench_benchmark", "mxbench_regression"):
        assert report_file(dag_id, run_id) is None
        pipeline.expand({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]},
                        DagRunFolder(config.existing_dag_run_dir(dag_id, run_id)), TARGETS, dag_id=dag_id)
        assert (config.dag_run_dir(dag_id, run_id) / "request.json").is_file()
    assert sorted(p.relative_to(old) for p in old.rglob("*")) == before  # nothing written into it
    # a folder whose stored record names its DAG is that DAG's, and only that DAG's
    old2 = config.legacy_dag_run_dir("manual__old")
    old2.mkdir()
    (old2 / "stored.json").write_text('{"dag_id": "mxbench_regression", "run_id": "manual__old"}')
    assert config.existing_dag_run_dir("mxbench_regression", "manual__old") == old2
    assert config.existing_dag_run_dir("mxbench_benchmark", "manual__old") == config.dag_run_dir(
        "mxbench_benchmark", "manual__old")


def test_credentials_in_a_dataset_url_never_reach_request_json(tmp_path):
    params = {"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"],
              "dataset": "https://alice:s3cret@example.invalid/cifar-10-python.tar.gz"}
    pipeline.expand(params, DagRunFolder(tmp_path), TARGETS)
    text = (tmp_path / "request.json").read_text()
    assert "s3cret" not in text and "alice" not in text
    assert "https://example.invalid/cifar-10-python.tar.gz" in text


def test_a_failed_data_preparation_is_the_named_root_cause_of_every_run_not_run(tmp_path):
    folder = DagRunFolder(tmp_path)
    runs = pipeline.expand({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32", "cpu2w-bs32"]},
                           folder, TARGETS)
    missing = tmp_path / "data" / "cifar.tar.gz"
    with pytest.raises(MxbenchError):
        pipeline.prepare_data({"dataset": str(missing)}, folder, tmp_path / "data")
    cause = f"data preparation failed: CIFAR-10 source {missing} does not exist"
    # the run task's stage fails with it before any launcher is made
    no_launcher = lambda name: pytest.fail("no launcher may be made without prepared data")  # noqa: E731
    with pytest.raises(run_stage.RunFailed, match=re.escape(f"run {runs[0]['key']}: {cause}")):
        run_stage.run_task(runs[0], folder, 60, launcher_for=no_launcher, task={})
    assert not folder.run(runs[0]["key"]).path.exists()
    pipeline.parse_all(folder)
    assert {f["cause"] for f in failed_runs(folder)} == {f"the run never started: {cause}"}
    assert failure_message(folder) == f"{cause} (2 run(s) not run)"


def test_a_failed_expansion_is_named_even_without_a_request(tmp_path):
    from mxbench.matrix.variants import VariantError

    targets = {"local": Target("local", 1, 0)}
    with pytest.raises(VariantError):
        pipeline.expand({"preset": "seed", "repeats": 1, "only_variants": ["8gpu-bs1024"]}, DagRunFolder(tmp_path),
                        targets)
    with pytest.raises(MxbenchError, match="^expanding the variants failed: variant 8gpu-bs1024 needs 8 GPUs"):
        pipeline.parse_all(DagRunFolder(tmp_path))
    assert failure_message(DagRunFolder(tmp_path)).startswith("expanding the variants failed: variant 8gpu-bs1024")


def test_task_timeout_is_the_run_deadline_plus_grace():
    from datetime import timedelta

    from mxbench.airflow_glue.operators import task_timeout

    assert task_timeout({"run_timeout_minutes": 7}) == timedelta(minutes=12)


def test_a_retry_first_reaps_what_a_killed_attempt_left_running(tmp_path):
    import subprocess

    (run,) = expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]}, TARGETS)
    # an earlier attempt whose task was SIGKILLed: meta says running, its trainer still lives
    leftover = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        start = start_ticks(leftover.pid)
        write_json(tmp_path / run["key"] / "pids.json", {"worker-0": {"pid": leftover.pid, "start": start}})
        write_json(tmp_path / run["key"] / "meta.json", {"key": run["key"], "status": "running"})
        with pytest.raises(run_stage.RunFailed):
            run_stage.run_one(run, DagRunFolder(tmp_path), {"dir": str(tmp_path / "data"), "records": {"train": 10}},
                              deadline_s=5)
        assert leftover.wait(timeout=5) == -9
    finally:
        leftover.kill()
    meta = json.loads((tmp_path / run["key"] / "meta.json").read_text())
    assert meta["reaped"] == [["worker-0", leftover.pid]]
    assert (tmp_path / "attempts" / f"{run['key']}.1" / "pids.json").is_file()


def test_parse_stops_what_an_interrupted_run_left_and_says_so(tmp_path):
    import subprocess

    (run,) = pipeline.expand({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]},
                             DagRunFolder(tmp_path), TARGETS)
    leftover = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        start = start_ticks(leftover.pid)
        write_json(tmp_path / run["key"] / "pids.json", {"worker-0": {"pid": leftover.pid, "start": start}})
        write_json(tmp_path / run["key"] / "meta.json", {"key": run["key"], "status": "running"})
        pipeline.parse_all(DagRunFolder(tmp_path))
        assert leftover.wait(timeout=5) == -9
    finally:
        leftover.kill()
    (failure,) = failed_runs(DagRunFolder(tmp_path))
    assert failure["cause"] == "the run was interrupted (its task died mid-run); killed 1 leftover process(es)"


def test_an_attempt_that_wakes_up_after_a_newer_one_took_over_leaves_its_record_alone(tmp_path, monkeypatch):
    from mxbench import launchers

    (run,) = expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]}, TARGETS)
    newer = {"key": run["key"], "status": "running", "attempt": "newer"}

    class HungThenWoken:
        def reap(self, run_folder):
            return []

        def execute(self, variant, data_dir, run_folder, deadline_s, build=None):
            # while this attempt hung, a retry moved its folder to attempts/ and started afresh
            run_folder.path.replace(tmp_path / "attempts-by-the-retry")
            write_json(run_folder.meta, newer)
            return launchers.Launched([], [])

    monkeypatch.setattr(launchers, "get", lambda name: HungThenWoken())
    with pytest.raises(run_stage.RunFailed, match="a newer attempt took over its folder"):
        run_stage.run_one(run, DagRunFolder(tmp_path), {"dir": str(tmp_path / "data"), "records": {"train": 10_000}},
                          deadline_s=5)
    assert json.loads((tmp_path / run["key"] / "meta.json").read_text()) == newer


def test_an_unreachable_launcher_fails_its_own_runs_with_the_cause_and_the_others_go_on(tmp_path):
    class Dead:
        def target(self):
            raise MxbenchError("host mxbench_ssh_1 (127.0.0.1): cannot connect: Connection refused")

    class Fine:
        def target(self):
            return Target("local", 1, 0, one_machine=True)

    targets, unavailable = pipeline.targets_for(["local", "ssh"], lambda name: {"local": Fine(), "ssh": Dead()}[name])
    assert list(targets) == ["local"]
    assert unavailable == {"ssh": "the ssh target is unavailable: host mxbench_ssh_1 (127.0.0.1): cannot connect: "
                                  "Connection refused"}
    runs = pipeline.expand({"preset": "cpu-demo", "repeats": 1, "launchers": ["local", "ssh"],
                            "only_variants": ["cpu1-bs32"]}, DagRunFolder(tmp_path), targets, unavailable)
    ssh_run = next(r for r in runs if r["launcher"] == "ssh")
    never_called = lambda name: pytest.fail("no launcher may be made for an unavailable target")  # noqa: E731
    with pytest.raises(run_stage.RunFailed, match="run cpu1-bs32__ssh__r1 failed: the ssh target is unavailable: "
                                                  "host mxbench_ssh_1 .*Connection refused"):
        run_stage.run_one(ssh_run, DagRunFolder(tmp_path), {"dir": "/nowhere", "records": {"train": 1000}}, 60,
                          never_called)
    request = json.loads((tmp_path / "request.json").read_text())
    assert request["unavailable"] == unavailable and request["machine_sets"] == {"local": ["local", "ssh"]}
    pipeline.parse_all(DagRunFolder(tmp_path))
    pipeline.join(DagRunFolder(tmp_path))
    from mxbench.report import provenance

    assert any(n.startswith("UNAVAILABLE: the ssh target is unavailable") for n in provenance(DagRunFolder(tmp_path)))
    assert any(n.startswith("SHARED MACHINES: local and ssh") for n in provenance(DagRunFolder(tmp_path)))


def test_a_launcher_that_cannot_be_made_fails_the_run_with_the_reason(tmp_path):
    (run,) = expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]}, TARGETS)

    def missing(name):
        raise MxbenchError("ssh connection 'mxbench_ssh_1': The conn_id `mxbench_ssh_1` isn't defined")

    with pytest.raises(run_stage.RunFailed, match="isn't defined"):
        run_stage.run_one(run, DagRunFolder(tmp_path), {"dir": "/nowhere", "records": {"train": 1000}}, 60, missing)
    assert json.loads((tmp_path / run["key"] / "meta.json").read_text())["status"] == "failed"


def test_a_store_failure_fails_the_dag_run_though_every_run_measured(tmp_path):
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "report.md").write_text("# report")
    assert failure_message(DagRunFolder(tmp_path)) is None
    write_json(tmp_path / "stored.json", {"error": "OperationalError: could not connect to server"})
    assert failure_message(DagRunFolder(tmp_path)) == ("storing the results in the results database failed: "
                                             "OperationalError: could not connect to server")


def test_two_runs_asking_for_the_same_synthetic_data_at_once_share_one_generation(tmp_path, monkeypatch):
    """On main both generated it, and the later one deleted the folder the earlier one was already
    using (an rmtree under another DAG run's prepare step)."""
    import threading

    from conftest import train_python

    generations = tmp_path / "generations.log"
    spy = tmp_path / "python"
    spy.write_text(f'#!/usr/bin/env bash\necho "$@" >> {generations}\nexec {train_python()} "$@"\n')
    spy.chmod(0o755)
    monkeypatch.setenv("MXBENCH_TRAIN_PYTHON", str(spy))
    data_root = tmp_path / "data"
    data_root.mkdir()
    start, got, errors = threading.Barrier(2), [], []

    def caller():
        start.wait()
        try:
            folder = pipeline.synthetic_source(data_root, 500)
            got.append((folder, (folder / "test_batch").stat().st_ino))  # the file this run goes on to read
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert len(generations.read_text().splitlines()) == 1  # one generated it, the other waited and reused it
    (folder, _), _ = got
    assert {g[0] for g in got} == {folder} and {g[1] for g in got} == {(folder / "test_batch").stat().st_ino}
    assert sorted(p.name for p in data_root.iterdir() if not p.name.endswith(".lock")) == [folder.parent.name]


def test_every_stage_of_a_dag_run_begun_before_folders_were_keyed_by_dag_keeps_to_its_folder(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    from mxbench import config
    from mxbench.airflow_glue import dag_tasks

    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path))
    run_id = "scheduled__2026-10-01T00:00:00+00:00"
    legacy = config.legacy_dag_run_dir(run_id)
    # expanded (and run) before the upgrade, under the old name; parsed after it, or cleared and rerun
    pipeline.expand({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]}, DagRunFolder(legacy), TARGETS,
                    dag_id="mxbench_regression")
    dag_run = SimpleNamespace(dag_id="mxbench_regression")
    dag_tasks.parse_logs.function(params={"launchers": ["local"]}, run_id=run_id, dag_run=dag_run)
    dag_tasks.join_results.function({}, run_id=run_id, dag_run=dag_run)
    built = dag_tasks.report.function({}, run_id=run_id, dag_run=dag_run)
    with pytest.raises(AirflowFailException, match=r"1 run\(s\) without a result:\ncpu1-bs32__local__r1: not run"):
        dag_tasks.check_runs.function(run_id=run_id, dag_run=dag_run)
    assert (legacy / "tables" / "summary.csv").is_file() and built["html"].startswith(str(legacy))
    assert not config.dag_run_dir("mxbench_regression", run_id).exists()


def test_a_run_whose_data_set_or_build_venv_was_pruned_since_fails_naming_what_to_clear(monkeypatch, tmp_path):
    """A cleared run task of an older DAG run, after other DAG runs pruned its data set and its
    build's venv (the real pruning, the real local launcher): the cause says what to clear."""
    import os

    from mxbench import config
    from mxbench.builds import venv_and_data_caches

    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MXBENCH_KEEP_DATA", "1")
    monkeypatch.setenv("MXBENCH_KEEP_BUILDS", "1")
    data_root, envs = config.data_dir(), config.home() / "envs"
    old_data, new_data = data_root / "rec-0123456789ab", data_root / "rec-ba9876543210"
    old_venv, new_venv = envs / "mxnet-1.6.0-0123456789", envs / "mxnet-1.9.0-fedcba9876"
    for age, entry in ((86400, old_data), (0, new_data), (86400, old_venv), (0, new_venv)):
        (entry / "bin").mkdir(parents=True)
        (entry / "bin" / "python").symlink_to(config.train_env_python())
        os.utime(entry, (os.path.getmtime(entry) - age,) * 2)
    # later DAG runs' prepare_data and resolve_build prune what they did not use
    assert [p.path for p in venv_and_data_caches.prune_data(data_root, used=[new_data])] == [old_data]
    assert [p.path for p in venv_and_data_caches.prune_builds(current=new_venv)] == [old_venv]
    (run,) = expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]}, TARGETS)
    run = {**run, "build": {"package": "mxnet==1.6.0", "version": "1.6.0", "python": str(old_venv / "bin" / "python")}}
    with pytest.raises(run_stage.RunFailed, match=re.escape(
            f"run {run['key']} failed: the prepared data {old_data} was pruned since prepare_data ran "
            "(MXBENCH_KEEP_DATA): clear prepare_data too")):
        run_stage.run_one(run, DagRunFolder(tmp_path / "dag"), {"dir": str(old_data), "records": {"train": 10_000}}, 60)
    with pytest.raises(run_stage.RunFailed, match=re.escape(
            f"run {run['key']} failed: the MXNet build's training interpreter {old_venv / 'bin' / 'python'} "
            "was pruned since resolve_build ran (MXBENCH_KEEP_BUILDS): clear resolve_build too")):
        run_stage.run_one(run, DagRunFolder(tmp_path / "dag"), {"dir": str(new_data), "records": {"train": 10_000}}, 60)
    assert not (tmp_path / "dag" / run["key"] / "plan.json").exists()  # nothing was started
