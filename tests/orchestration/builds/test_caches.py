"""Pruning the caches (mxbench.builds.venv_and_data_caches): build venvs and data sets beyond the N most recently used
are removed and reported with the bytes freed; one in use (a run holds it through the real
``stages.run_stage.run_one``, a build is being made, a data set is being converted) is never removed;
nothing that mxbench did not name is touched. The venvs here are small folders, not 700 MB
ones; the locks, stamps and code paths are the real ones, held from other processes."""
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mxbench import config
from mxbench.builds import mxnet_builds, venv_and_data_caches
from mxbench.launchers import Launched
from mxbench.matrix.variants import Target, expand_runs
from mxbench.run_folder import DagRunFolder
from mxbench.stages import pipeline, run_stage
from mxbench_train.data_sources import SYNTHETIC_VERSION
from mxbench_train.errors import MxbenchError
from mxbench_train.events import format_event

DAY = 86400


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def entry(root: Path, name: str, kbytes: int, days_ago: float) -> Path:
    """A cache folder of ``kbytes`` KB, last used ``days_ago`` days ago (its stamp's time)."""
    folder = root / name
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "payload").write_bytes(os.urandom(kbytes * 1024))
    stamp = folder / venv_and_data_caches.STAMP
    stamp.write_text("")
    when = time.time() - days_ago * DAY
    os.utime(stamp, (when, when))
    return folder


@contextlib.contextmanager
def held_by_another_process(*paths, home_dir: Path):
    """``venv_and_data_caches.in_use(*paths)`` held by a separate process until the block ends."""
    code = ("import sys\nfrom mxbench.builds import venv_and_data_caches\n"
            "with venv_and_data_caches.in_use(*sys.argv[1:]):\n"
            "    print('holding', flush=True)\n    sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, paths)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "MXBENCH_HOME": str(home_dir)})
    try:
        assert proc.stdout.readline().strip() == "holding"
        yield
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def prune_in_another_process(home_dir: Path, keep_builds: int, keep_data: int, using=()) -> str:
    """Prune as another DAG run's tasks would, from another process, having just used ``using``; its log."""
    code = ("import sys\nfrom mxbench import config\nfrom mxbench.builds import venv_and_data_caches\n"
            "with venv_and_data_caches.in_use(*sys.argv[1:]):\n"
            "    venv_and_data_caches.prune_builds()\n    venv_and_data_caches.prune_data(config.data_dir())\n")
    done = subprocess.run([sys.executable, "-c", code, *map(str, using)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MXBENCH_HOME": str(home_dir), "MXBENCH_KEEP_BUILDS": str(keep_builds),
                               "MXBENCH_KEEP_DATA": str(keep_data)})
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_running_run_holds_its_data_set_and_build_venv_so_pruning_skips_them(home):
    envs, data = home / "envs", home / "data"
    old_venv = entry(envs, "mxnet-1.6.0-0123456789", 64, days_ago=30)  # the oldest: the run's build
    entry(envs, "mxnet-1.7.0.post2-abcdef0123", 64, days_ago=20)
    newest_venv = entry(envs, "mxnet-1.9.0-fedcba9876", 64, days_ago=1)
    old_data = entry(data, "rec-0123456789ab", 128, days_ago=30)  # the oldest: the run's data set
    entry(data, "rec-ba9876543210", 128, days_ago=20)
    newest_data = entry(data, "rec-synthetic-v1-3000", 128, days_ago=1)
    (run,) = expand_runs({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]},
                         {"local": Target("local", 1, 0)})
    run = {**run, "build": {"package": "mxnet==1.6.0", "version": "1.6.0", "python": str(old_venv / "bin" / "python")}}
    logs = []

    class PruneWhileRunning:
        """A launcher whose run is: another DAG run prunes everything but the newest, meanwhile."""

        def reap(self, run_folder):
            return []

        def execute(self, variant, data_dir, run_folder, deadline_s, build=None):
            # the run stamped its use; another DAG run then used the newest ones, so that the
            # run's are past the 1 to keep, and pruned everything else
            assert time.time() - venv_and_data_caches.last_used(old_venv) < 60
            assert time.time() - venv_and_data_caches.last_used(old_data) < 60
            logs.append(prune_in_another_process(home, keep_builds=1, keep_data=1,
                                                 using=(newest_venv / "bin" / "python", newest_data)))
            # the trainer's word on what it imported, which the run checks against its build
            (run_folder.path / "rank0.log").write_text(
                format_event("run_start", environment={"mxnet_version": "1.6.0"}))
            return Launched([], [SimpleNamespace(start_s=0.0, wall_s=1.0, warning=None)], {"python": build.python})

    dag_dir = home / "runs" / "x"
    dag_dir.mkdir(parents=True)
    result = run_stage.run_one(run, DagRunFolder(dag_dir), {"dir": str(old_data), "records": {"train": 10_000}}, 60,
                               lambda name: PruneWhileRunning())
    assert result["status"] == "ok"
    log = logs[0]
    assert sorted(p.name for p in envs.iterdir() if p.is_dir()) == [old_venv.name, newest_venv.name], log
    assert sorted(p.name for p in data.iterdir() if p.is_dir()) == [old_data.name, newest_data.name], log
    assert "mxbench: kept build venv mxnet-1.6.0-0123456789 (past the 1 most recently used): in use" in log
    assert "mxbench: kept prepared data set rec-0123456789ab (past the 1 most recently used): in use" in log
    assert f"mxbench: pruned build venv {envs / 'mxnet-1.7.0.post2-abcdef0123'} (last used " in log
    assert "mxbench: pruned 1 build venv(s) under" in log and "(MXBENCH_KEEP_BUILDS=1)" in log
    assert "(MXBENCH_KEEP_DATA=1)" in log
    # the run over, nothing holds them: the next pruning removes them
    log = prune_in_another_process(home, keep_builds=1, keep_data=1)
    assert sorted(p.name for p in envs.iterdir() if p.is_dir()) == [newest_venv.name], log
    assert sorted(p.name for p in data.iterdir() if p.is_dir()) == [newest_data.name], log
    assert not (envs / f"{old_venv.name}.lock").exists(), "a pruned entry's lock file goes with it"


def test_preparing_data_keeps_the_n_most_recent_and_reports_what_it_freed(home, monkeypatch, capsys):
    data = home / "data"
    kept_recent = entry(data, "rec-aaaaaaaaaaaa", 256, days_ago=2)
    pruned = entry(data, "rec-bbbbbbbbbbbb", 2048, days_ago=10)
    in_use = entry(data, "rec-cccccccccccc", 256, days_ago=40)
    old_synthetic = entry(data, f"synthetic-v{SYNTHETIC_VERSION}-50", 64, days_ago=30)
    recent_synthetic = entry(data, f"synthetic-v{SYNTHETIC_VERSION}-55", 64, days_ago=3)
    # an administrator's own files in the data folder are never mxbench's to prune
    (data / "cifar-10-python.tar.gz").write_bytes(b"x" * 1000)
    mine = entry(data, "my-cifar", 16, days_ago=400)
    elsewhere = entry(home.parent / "elsewhere", "rec-dddddddddddd", 16, days_ago=400)
    (data / "rec-dddddddddddd").symlink_to(elsewhere)
    monkeypatch.setenv("MXBENCH_KEEP_DATA", "2")
    with held_by_another_process(in_use, home_dir=home):  # a run of another DAG run trains from it
        long_ago = time.time() - 40 * DAY  # ... and began long ago: its use stamp is that old
        os.utime(in_use / venv_and_data_caches.STAMP, (long_ago, long_ago))
        prepared = pipeline.prepare_data({"dataset": "synthetic", "synthetic_images": 200},
                                         DagRunFolder(home / "runs" / "x"), data)
    log = capsys.readouterr().out
    new_rec, new_source = Path(prepared["dir"]), data / f"synthetic-v{SYNTHETIC_VERSION}-200"
    assert new_rec == data / f"rec-synthetic-v{SYNTHETIC_VERSION}-200" and (new_rec / "cifar10_train.rec").is_file()
    left = sorted(p.name for p in data.iterdir() if not p.name.endswith(".lock") and not p.name.startswith("."))
    assert left == sorted(["cifar-10-python.tar.gz", "my-cifar", new_rec.name, kept_recent.name, in_use.name,
                           "rec-dddddddddddd", new_source.name, recent_synthetic.name]), log
    assert not pruned.exists() and not old_synthetic.exists() and mine.exists() and elsewhere.exists()
    assert f"mxbench: pruned prepared data set {pruned} (last used " in log
    line = next(text for text in log.splitlines() if text.startswith(f"mxbench: pruned prepared data set {pruned}"))
    assert line.endswith(" MB freed") and 2.0 <= float(line.split("): ")[1].split()[0]) < 2.3, line  # 2 MiB + folders
    assert "mxbench: kept prepared data set rec-cccccccccccc (past the 2 most recently used): in use" in log
    assert f"mxbench: pruned synthetic source {old_synthetic} (last used " in log
    assert "mxbench: pruned 1 prepared data set(s) under" in log and "keeping the 2 most recently used" in log
    # released, the old one goes at the next preparation (a cache hit)
    capsys.readouterr()
    again = pipeline.prepare_data({"dataset": "synthetic", "synthetic_images": 200}, DagRunFolder(home / "runs" / "y"),
                                  data)
    assert again["cache_hit"] and not in_use.exists() and kept_recent.exists()


def test_a_build_being_made_is_never_pruned_and_each_use_stamps_it(home, monkeypatch, capsys):
    entries = [{"since": "2026-01-01", "package": "mxnet==1.6.0", "image": "i"},
               {"since": "2026-02-01", "package": "mxnet==1.7.0.post2", "image": "i"},
               {"since": "2026-03-01", "package": "mxnet==1.8.0.post0", "image": "i"}]
    path = home.parent / "builds.json"
    path.write_text(json.dumps(entries))
    first, second, third = mxnet_builds.load_manifest(path)
    making_first, release_first = threading.Event(), threading.Event()

    def fake_create(build, venv, spec, base, pip_timeout):
        (venv / "bin").mkdir(parents=True)
        (venv / "bin" / "python").write_text("")
        (venv / mxnet_builds.STAMP).write_text(json.dumps({"spec": spec}))
        if build is first:  # a slow pip install, meanwhile another task picks another build
            making_first.set()
            assert release_first.wait(30)

    monkeypatch.setattr(mxnet_builds, "_create", fake_create)
    monkeypatch.setattr(mxnet_builds, "base_python", lambda: sys.executable)
    monkeypatch.setenv("MXBENCH_KEEP_BUILDS", "1")
    envs = home / "envs"
    maker = threading.Thread(target=mxnet_builds.ensure_venv, args=(first,))
    maker.start()
    try:
        assert making_first.wait(30)
        second_python = mxnet_builds.ensure_venv(second)
    finally:
        release_first.set()
        maker.join()
    first_venv, second_venv = mxnet_builds.env_dir(first, envs), Path(second_python).parent.parent
    log = capsys.readouterr().out
    # the second's call found the first past the one to keep, but being made: kept
    assert f"mxbench: kept build venv {first_venv.name} (past the 1 most recently used): in use" in log
    # then the first's call, done making it, stamped it and pruned the second, older by use
    assert first_venv.is_dir() and not second_venv.exists(), log
    assert f"mxbench: pruned build venv {second_venv} (last used " in log
    mxnet_builds.ensure_venv(third)
    log = capsys.readouterr().out
    assert [p.name for p in envs.iterdir() if p.is_dir()] == [mxnet_builds.env_dir(third, envs).name], log
    assert f"mxbench: pruned build venv {first_venv} (last used " in log
    # the pinned build (the training env itself) prunes the others too, and is never one of them
    monkeypatch.setattr(mxnet_builds, "is_pinned", lambda build: True)
    monkeypatch.setenv("MXBENCH_KEEP_BUILDS", "1")
    assert mxnet_builds.ensure_venv(first) == config.train_env_python()
    assert len([p for p in envs.iterdir() if p.is_dir()]) == 1


def test_a_lock_unlinked_by_pruning_while_waited_on_is_taken_afresh(tmp_path):
    # a maker waits on an entry's lock file while pruning holds it, removes the entry and unlinks
    # the file: the maker must then lock the file a newcomer would create, not the dead one
    entry_dir = tmp_path / "mxnet-1.6.0-0123456789"
    entry_dir.mkdir()
    pruner = venv_and_data_caches._lock(venv_and_data_caches.lock_path(entry_dir), fcntl.LOCK_EX)
    got = threading.Event()

    def maker():
        with venv_and_data_caches.making(entry_dir):
            got.set()
            time.sleep(1.0)

    thread = threading.Thread(target=maker)
    thread.start()
    time.sleep(0.3)
    venv_and_data_caches.lock_path(entry_dir).unlink()
    os.close(pruner)
    assert got.wait(10)
    lock = venv_and_data_caches.lock_path(entry_dir)
    assert venv_and_data_caches._lock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB) is None, \
        "the maker holds the lock file now at the path"
    thread.join()


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_keep_setting_is_named(home, monkeypatch, value):
    monkeypatch.setenv("MXBENCH_KEEP_DATA", value)
    with pytest.raises(MxbenchError, match=f"MXBENCH_KEEP_DATA={value!r}: expected a whole number of at least 1 "
                                           r"\(how many data sets of each kind \(synthetic sources, prepared data "
                                           r"sets\) to keep; default 4\)"):
        venv_and_data_caches.prune_data(home / "data")


def test_defaults_keep_three_builds_and_four_data_sets_of_each_kind(home, monkeypatch):
    monkeypatch.delenv("MXBENCH_KEEP_BUILDS", raising=False)
    monkeypatch.delenv("MXBENCH_KEEP_DATA", raising=False)
    kinds = (venv_and_data_caches.BUILD_VENVS, *venv_and_data_caches.DATA_KINDS)
    assert [venv_and_data_caches.keep_count(k) for k in kinds] == [3, 4, 4]
    for i in range(5):
        entry(home / "data", f"rec-{i:012d}", 4, days_ago=i)
        entry(home / "data", f"synthetic-v1-{100 + i}", 4, days_ago=i)
    assert len(venv_and_data_caches.prune_data(home / "data", log=lambda line: None)) == 2
    assert sorted(p.name for p in (home / "data").iterdir() if p.is_dir())[:4] == [f"rec-{i:012d}" for i in range(4)]
