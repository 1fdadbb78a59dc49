
"""The results store (mxbench.store) on SQLite and on a real PostgreSQL server: recording DAG run
folders idempotently, migrations, history, baselines, and the ``history`` / ``import`` commands."""
import itertools
import json
import re
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
import sqlalchemy as sa
from alembic import command

from mxbench import cli, store
from mxbench.run_folder import DagRunFolder
from standins import postgres
from support.stored_runs import (
    CPU_BOX,
    CPU_FP,
    GPU_BOX,
    HEAD,
    IMAGE_190,
    OTHER_CPU_BOX,
    OTHER_FP,
    SETUP,
    T0,
    VENV_190,
    make_dag_dir,
    ok_runs,
    upgrade_to,
    variant,
)

_databases = itertools.count()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    """An empty database of its own, on SQLite or on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'results.db'}"
    server = request.getfixturevalue("postgres_url")
    name = f"store_test_{next(_databases)}"
    return postgres.create_database(server, name)


def count(url, table):
    with store.engine(url).connect() as connection:
        return connection.execute(sa.select(sa.func.count()).select_from(sa.table(table))).scalar()


def rows(url, table, **where):
    with store.engine(url).connect() as connection:
        query = sa.select(sa.text("*")).select_from(sa.table(table))
        for column, value in where.items():
            query = query.where(sa.column(column) == value)
        return [dict(r._mapping) for r in connection.execute(query)]


# --- recording ---------------------------------------------------------------------------------

def test_record_twice_replaces_rather_than_duplicates(url, tmp_path):
    dag_dir = make_dag_dir(tmp_path, "run1", ok_runs(launchers=("local", "ssh")))
    first = store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_benchmark", run_id="manual__1",
                                 trigger="manual",
                                 build={"package": "mxnet==1.9.1", "commit": None, "image": "mxbench:1.9.1"})
    assert first == {"dag_id": "mxbench_benchmark", "run_id": "manual__1", "repeats": 4, "fingerprint": CPU_FP,
                     "fingerprints": {"local": CPU_FP, "ssh": CPU_FP}, "trigger": "manual", "logical_date": None,
                     "data_interval": None}
    counts = {t: count(url, t) for t in ("dag_runs", "repeats", "variants", "environments")}
    assert counts == {"dag_runs": 1, "repeats": 4, "variants": 1, "environments": 1}

    # the run is parsed again with a different figure (a rerun task), and recorded again
    runs_csv = dag_dir / "tables" / "runs.csv"
    table = pd.read_csv(runs_csv)
    table.loc[0, "samples_per_sec"] = 150.0
    table.to_csv(runs_csv, index=False)
    store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_benchmark", run_id="manual__1", trigger="manual",
                         build={"package": "mxnet==1.9.1", "commit": None, "image": "mxbench:1.9.1"})
    assert {t: count(url, t) for t in counts} == counts
    (dag_run,) = rows(url, "dag_runs")
    assert (dag_run["state"], dag_run["runs_ok"], dag_run["runs_failed"]) == ("ok", 4, 0)
    # the build named an image, but local and ssh runs use none
    assert (dag_run["mxnet_version"], dag_run["mxnet_package"], dag_run["image"]) == ("1.9.1", "mxnet==1.9.1", None)
    # a runs.csv older than its what-ran columns: the build asked for, each run's metrics.json version
    assert {(r["mxnet_asked"], r["mxnet_reported"], r["runtime"]) for r in rows(url, "repeats")} == {
        ("mxnet==1.9.1", "1.9.1", None)}
    assert dag_run["preset"] == "cpu-demo" and dag_run["environment"] == CPU_FP
    speeds = {r["run_key"]: r["samples_per_sec"] for r in rows(url, "repeats")}
    assert speeds["cpu2-bs32__local__r1"] == 150.0
    assert {r["machine_set"] for r in rows(url, "repeats")} == {"local"}
    (environment,) = rows(url, "environments")
    assert environment["host_class"] == "cpu: AMD EPYC 7B13 x2" and environment["gpu_count"] == 0


def test_failed_and_unstarted_runs_are_kept_and_siblings_lose_nothing(url, tmp_path):
    runs = ok_runs(speeds=(100.0,)) + [
        (variant(), "local", 2, "failed", None, "worker-1 exited with status 137 (killed)"),
        (variant(), "local", 3, "ok", 99.0, None)]
    dag_dir = make_dag_dir(tmp_path, "run1", runs, unparsed={"cpu2-bs32__local__r3"})
    store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_benchmark", run_id="scheduled__1",
                         trigger="scheduled",
                         logical_date=T0, data_interval=(T0 - timedelta(days=1), T0))
    by_key = {r["run_key"]: r for r in rows(url, "repeats")}
    assert by_key["cpu2-bs32__local__r1"]["status"] == "ok"
    assert by_key["cpu2-bs32__local__r1"]["samples_per_sec"] == 100.0
    failed = by_key["cpu2-bs32__local__r2"]
    assert (failed["status"], failed["cause"]) == ("failed", "worker-1 exited with status 137 (killed)")
    assert failed["samples_per_sec"] is None and failed["environment"] is None
    assert by_key["cpu2-bs32__local__r3"]["status"] == "not run"
    assert "never started" in by_key["cpu2-bs32__local__r3"]["cause"]
    (dag_run,) = rows(url, "dag_runs")
    assert (dag_run["state"], dag_run["runs_ok"], dag_run["runs_failed"]) == ("failed", 1, 2)
    assert dag_run["trigger"] == "scheduled"


def test_each_repeat_records_what_it_ran_on_and_the_dag_run_the_image_its_pods_used(url, tmp_path):
    ran = {"local": {"mxnet_asked": "mxnet==1.9.0", "mxnet_reported": "1.9.1", "runtime": VENV_190},
           "kubernetes": {"mxnet_asked": "mxnet==1.9.0", "mxnet_reported": "1.9.0", "runtime": IMAGE_190}}
    runs = ok_runs(launchers=("local", "kubernetes")) + [
        (variant(), "kubernetes", 3, "failed", None, "the pod was never scheduled")]
    dag_dir = make_dag_dir(tmp_path, "run1", runs, ran=ran)
    runs_csv = dag_dir / "tables" / "runs.csv"  # a run that never started reports nothing and used nothing
    table = pd.read_csv(runs_csv)
    table.loc[table["status"] == "failed", ["mxnet_reported", "runtime"]] = None
    table.to_csv(runs_csv, index=False)
    store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_regression", run_id="scheduled__1",
                         trigger="scheduled",
                         build={"package": "mxnet==1.9.0", "commit": None, "image": IMAGE_190})
    by_run = {(r["launcher"], r["repeat"]): (r["mxnet_asked"], r["mxnet_reported"], r["runtime"])
              for r in rows(url, "repeats")}
    # runs.csv wins over metrics.json (whose environment says 1.9.1 for every run here)
    assert by_run == {("local", 1): ("mxnet==1.9.0", "1.9.1", VENV_190),
                      ("local", 2): ("mxnet==1.9.0", "1.9.1", VENV_190),
                      ("kubernetes", 1): ("mxnet==1.9.0", "1.9.0", IMAGE_190),
                      ("kubernetes", 2): ("mxnet==1.9.0", "1.9.0", IMAGE_190),
                      ("kubernetes", 3): ("mxnet==1.9.0", None, None)}
    (dag_run,) = rows(url, "dag_runs")
    assert (dag_run["mxnet_package"], dag_run["image"]) == ("mxnet==1.9.0", IMAGE_190)


def test_a_local_only_dag_run_records_no_image_whatever_its_build_names(url, tmp_path):
    ran = {"local": {"mxnet_asked": "mxnet==1.9.0", "mxnet_reported": "1.9.0", "runtime": VENV_190}}
    dag_dir = make_dag_dir(tmp_path, "run1", ok_runs(), ran=ran)
    store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_regression", run_id="scheduled__1",
                         trigger="scheduled",
                         build={"package": "mxnet==1.9.0", "commit": None, "image": IMAGE_190})
    (dag_run,) = rows(url, "dag_runs")
    assert dag_run["image"] is None and dag_run["mxnet_package"] == "mxnet==1.9.0"
    assert {r["runtime"] for r in rows(url, "repeats")} == {VENV_190}


def test_a_trigger_outside_the_three_is_refused(url, tmp_path):
    dag_dir = make_dag_dir(tmp_path, "run1", ok_runs())
    with pytest.raises(store.StoreError, match="trigger must be one of"):
        store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="d", run_id="r", trigger="sometimes")


def test_fingerprint_is_the_hardware_not_the_host():
    fp, facts = store.fingerprint(GPU_BOX)
    assert facts["host_class"] == "gpu: 8x Tesla V100-SXM2-16GB" and facts["gpu_count"] == 8
    assert store.fingerprint({**GPU_BOX, "host": "another", "mxnet_version": "2.0"})[0] == fp
    assert len(fp) == 16 and fp != CPU_FP != OTHER_FP


# --- migrations --------------------------------------------------------------------------------

def test_migrate_an_empty_database_twice(url):
    assert store.migrate(url) == HEAD
    assert store.migrate(url) == HEAD
    with store.engine(url).connect() as connection:
        inspector = sa.inspect(connection)
        assert ({"dag_runs", "repeats", "variants", "environments", "alembic_version"}
                <= set(inspector.get_table_names()))
        assert "ix_repeats_baseline" in {i["name"] for i in inspector.get_indexes("repeats")}


def test_the_migrated_schema_is_schema_py(url):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    store.migrate(url)
    with store.engine(url).connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), store.metadata)
    assert differences == []


def test_upgrade_a_0001_database_keeps_its_data(url, tmp_path):
    with store.engine(url).begin() as connection:
        cfg = store.alembic_config(connection)
        command.upgrade(cfg, "0001")
        columns = {c["name"] for c in sa.inspect(connection).get_columns("repeats")}
        assert "machine_set" not in columns
        now = datetime(2025, 6, 1)
        connection.execute(sa.text(
            "INSERT INTO environments (fingerprint, gpu_count, cpu_model, cpu_count, host_class, first_seen) "
            "VALUES ('abc', 0, 'old cpu', 4, 'cpu: old cpu x4', :now)"), {"now": now})
        connection.execute(sa.text("INSERT INTO variants (id, workers, batch_size) VALUES ('cpu1-bs32', 1, 32)"))
        connection.execute(sa.text(
            "INSERT INTO dag_runs (run_id, dag_id, trigger, measured_at, state, runs_ok, runs_failed, environment, "
            "recorded_at) VALUES ('old', 'mxbench_benchmark', 'manual', :now, 'ok', 1, 0, 'abc', :now)"), {"now": now})
        connection.execute(sa.text(
            "INSERT INTO repeats (dag_run, run_key, variant, launcher, repeat, environment, status, samples_per_sec) "
            "VALUES ('old', 'cpu1-bs32__local__r1', 'cpu1-bs32', 'local', 1, 'abc', 'ok', 123.5)"))
    assert store.migrate(url) == HEAD
    (repeat,) = rows(url, "repeats")
    assert repeat["samples_per_sec"] == 123.5 and repeat["machine_set"] is None
    assert rows(url, "dag_runs")[0]["image"] is None
    # revision 0007: a row stored before it cannot say what it measured, so it is in the history but in no
    # baseline, whichever setup is asked for (and of whatever DAG)
    assert rows(url, "repeats")[0]["setup_key"] is None
    assert store.history(url, "cpu1-bs32")["samples_per_sec"].tolist() == [123.5]
    for setup in (None, SETUP):
        found = store.baseline(url, "cpu1-bs32", "local", "abc", before=datetime(2026, 1, 1, tzinfo=timezone.utc),
                               setup=setup, dag_ids=["mxbench_benchmark", "mxbench_regression"])
        assert found.empty


def test_upgrade_a_0003_database_adds_what_each_run_ran_on_and_old_rows_read_back(url):
    upgrade_to(url, "0003")
    with store.engine(url).begin() as connection:  # as the 0003 code wrote them
        connection.execute(sa.text(
            "INSERT INTO environments (fingerprint, gpu_count, host_class, first_seen) VALUES (:fp, 0, 'cpu', :now)"),
            {"fp": CPU_FP, "now": T0})
        connection.execute(sa.text("INSERT INTO variants (id, workers) VALUES ('cpu1-bs32', 1)"))
        for day, (version, package, image) in enumerate([("1.8.0", "mxnet==1.8.0", "old:1.8.0"),
                                                         (None, "mxnet==1.7.0", None), (None, None, None)]):
            run_id = f"scheduled__day{day}"
            connection.execute(sa.text(
                "INSERT INTO dag_runs (run_id, dag_id, trigger, measured_at, mxnet_version, mxnet_package, image, "
                "state, runs_ok, runs_failed, environment, recorded_at) VALUES (:run, 'mxbench_regression', "
                "'scheduled', :when, :version, :package, :image, 'ok', 1, 0, :fp, :when)"),
                {"run": run_id, "when": T0 + timedelta(days=day), "version": version, "package": package,
                 "image": image, "fp": CPU_FP})
            connection.execute(sa.text(
                "INSERT INTO repeats (dag_id, dag_run, run_key, variant, launcher, repeat, environment, status, "
                "samples_per_sec) VALUES ('mxbench_regression', :run, 'cpu1-bs32__local__r1', 'cpu1-bs32', 'local', "
                "1, :fp, 'ok', :speed)"), {"run": run_id, "fp": CPU_FP, "speed": 100.0 + day})

    # the history page reads a store no task has upgraded yet: what it lacks reads as NULL
    unupgraded = store.read_history(url)
    assert unupgraded["build"].tolist() == ["1.8.0", "mxnet==1.7.0", "unknown"]
    assert unupgraded[["mxnet_asked", "mxnet_reported", "runtime"]].isna().all().all()

    assert store.migrate(url) == HEAD
    with store.engine(url).connect() as connection:
        columns = {c["name"]: c for c in sa.inspect(connection).get_columns("repeats")}
    assert all(columns[name]["nullable"] for name in ("mxnet_asked", "mxnet_reported", "runtime"))
    old = rows(url, "repeats")
    assert [(r["samples_per_sec"], r["mxnet_asked"], r["mxnet_reported"], r["runtime"]) for r in old] == [
        (100.0, None, None, None), (101.0, None, None, None), (102.0, None, None, None)]
    assert [r["image"] for r in rows(url, "dag_runs")] == ["old:1.8.0", None, None]  # left as recorded
    history = store.history(url, "cpu1-bs32")
    # what ran, for rows without their own report: the DAG run's version, else the package asked for
    assert history["build"].tolist() == ["1.8.0", "mxnet==1.7.0", "unknown"]
    assert history["samples_per_sec"].tolist() == [100.0, 101.0, 102.0]
    assert store.read_history(url).equals(history)


def test_history_and_the_step_finder_group_by_what_ran_not_by_what_was_asked(url, tmp_path):
    """Every DAG run asked for mxnet==1.9.0; from day 4 its interpreter held 1.9.1, 15% slower."""
    from mxbench.report import step_table

    for day in range(8):
        reported, mean = ("1.9.0", 1000.0) if day < 4 else ("1.9.1", 850.0)
        ran = {"local": {"mxnet_asked": "mxnet==1.9.0", "mxnet_reported": reported, "runtime": VENV_190}}
        dag_dir = make_dag_dir(tmp_path, f"day{day}", ok_runs(speeds=(mean, mean * 1.01, mean * 0.99)),
                               started=T0 + timedelta(days=day), environment={**CPU_BOX, "mxnet_version": reported},
                               ran=ran)
        store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_regression", run_id=f"scheduled__day{day}",
                             trigger="scheduled", logical_date=T0 + timedelta(days=day),
                             build={"package": "mxnet==1.9.0", "commit": None})
    history = store.history(url, "cpu2-bs32", launcher="local").assign(when=lambda h: h["measured_at"])
    assert set(history["mxnet_package"]) == set(history["mxnet_asked"]) == {"mxnet==1.9.0"}
    assert history.groupby("build")["run_id"].nunique().to_dict() == {"1.9.0": 4, "1.9.1": 4}
    (step,) = step_table(history).to_dict("records")
    assert (step["first build after"], step["last build before"]) == ("1.9.1", "1.9.0")
    assert float(step["level change"].rstrip("%")) < -10
    # by the package asked for, both sides are one build: the step cannot be put on a build
    (asked,) = step_table(history.assign(build=history["mxnet_package"])).to_dict("records")
    assert asked["first build after"] == asked["last build before"] == "mxnet==1.9.0"
    baseline = store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=("mxbench_regression", "scheduled__day5"),
                              setup=SETUP)
    assert set(baseline["build"]) == {"1.9.0", "1.9.1"} and set(baseline["runtime"]) == {VENV_190}


def test_an_unreachable_database_is_one_clear_error():
    with pytest.raises(store.StoreError, match=r"cannot reach the results store at postgresql\+psycopg2://u:\*\*\*@"):
        store.migrate("postgresql+psycopg2://u:secret@127.0.0.1:1/nothing")


# --- reading -----------------------------------------------------------------------------------

def record_series(url, tmp_path):
    """Eight DAG runs a day apart on CPU_BOX, one on other hardware, one with a failed repeat."""
    other = variant("cpu4-bs32", workers=4)
    for day in range(8):
        runs = ok_runs(speeds=(100.0 + day, 200.0 + day)) + ok_runs(other, speeds=(50.0,))
        if day == 6:  # this day's second repeat failed: its first still counts
            runs = [r if r[2] == 1 else (*r[:3], "failed", None, "timeout") for r in runs]
        if day == 7:  # this day measured only the other variant
            runs = ok_runs(other, speeds=(51.0,))
        dag_dir = make_dag_dir(tmp_path, f"day{day}", runs, started=T0 + timedelta(days=day))
        store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_benchmark", run_id=f"scheduled__day{day}",
                             trigger="scheduled", logical_date=T0 + timedelta(days=day))
    elsewhere = make_dag_dir(tmp_path, "elsewhere", ok_runs(speeds=(999.0,)), environment=OTHER_CPU_BOX,
                             started=T0 + timedelta(days=5, hours=1))
    store.record_dag_run(url, DagRunFolder(elsewhere), dag_id="mxbench_benchmark", run_id="manual__elsewhere",
                         trigger="manual")


def test_baseline_is_the_last_runs_of_the_same_machine(url, tmp_path, monkeypatch):
    monkeypatch.setenv("MXBENCH_BASELINE_DAGS", "mxbench_benchmark")  # record_series's DAG
    record_series(url, tmp_path)
    found = store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=T0 + timedelta(days=7, hours=1), runs=3,
                           setup=SETUP)
    # day 7 did not measure the variant, so the last three that did are days 4, 5, 6; day 6's
    # failed repeat is left out; the other machine's 999 is never there
    assert found["run_id"].tolist() == ["scheduled__day4"] * 2 + ["scheduled__day5"] * 2 + ["scheduled__day6"]
    assert found["samples_per_sec"].tolist() == [104.0, 204.0, 105.0, 205.0, 106.0]
    assert set(found["variant"]) == {"cpu2-bs32"} and set(found["status"]) == {"ok"}

    # strictly before: a run id excludes itself and anything later
    by_id = store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=("mxbench_benchmark", "scheduled__day5"), runs=2,
                           setup=SETUP)
    assert by_id["run_id"].unique().tolist() == ["scheduled__day3", "scheduled__day4"]
    assert store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=T0, setup=SETUP).empty
    assert store.baseline(url, "cpu2-bs32", "ssh", CPU_FP, before=T0 + timedelta(days=30), setup=SETUP).empty
    assert store.baseline(url, "cpu2-bs32", "local", OTHER_FP,
                          before=T0 + timedelta(days=30), setup=SETUP)["samples_per_sec"].tolist() == [999.0]


def test_history_is_in_time_order(url, tmp_path):
    record_series(url, tmp_path)
    found = store.history(url, "cpu2-bs32")
    assert len(found) == 2 * 7 + 1
    assert found["measured_at"].is_monotonic_increasing
    assert found["run_id"].iloc[-1] == "scheduled__day6" and "manual__elsewhere" in found["run_id"].tolist()
    assert found.loc[found["status"] == "failed", "cause"].tolist() == ["timeout"]
    assert len(store.history(url, "cpu2-bs32", fingerprint=OTHER_FP)) == 1
    assert store.history(url, "no-such-variant").empty


def test_history_of_some_dags(url, tmp_path):
    for dag_id, name in (("mxbench_benchmark", "cpu1-bench"), ("mxbench_regression", "cpu1-nightly")):
        folder = make_dag_dir(tmp_path, dag_id, ok_runs(variant(name)))
        store.record_dag_run(url, DagRunFolder(folder), dag_id=dag_id, run_id=f"manual__{dag_id}", trigger="manual")
    assert set(store.history(url, dag_ids=["mxbench_regression"])["variant"]) == {"cpu1-nightly"}
    assert set(store.history(url)["dag_id"]) == {"mxbench_benchmark", "mxbench_regression"}
    assert store.read_history(url).equals(store.history(url))


def test_reading_never_makes_or_upgrades_the_store(url, tmp_path):
    assert store.read_history(f"sqlite:///{tmp_path / 'none' / 'results.db'}").empty
    assert not (tmp_path / "none").exists()
    assert store.read_history(url).empty  # a database without tables yet
    with store.engine(url).connect() as connection:
        assert not sa.inspect(connection).has_table("repeats")



def test_read_sizes_gives_each_dag_runs_variants_and_its_depth_override(url, tmp_path):
    assert store.read_sizes(f"sqlite:///{tmp_path / 'none' / 'results.db'}").empty
    assert not (tmp_path / "none").exists()
    assert store.read_sizes(url).empty  # a database without tables yet: never made by a reader
    four = variant("cpu4-bs32", workers=4)
    store.record_dag_run(url, DagRunFolder(make_dag_dir(tmp_path, "plain", ok_runs() + ok_runs(four))),
                         dag_id="mxbench_benchmark",
                         run_id="plain", trigger="manual")
    store.record_dag_run(url, DagRunFolder(make_dag_dir(tmp_path, "deeper", ok_runs(), started=T0 + timedelta(days=1),
                                           params={"preset": "cpu-demo", "num_layers": 20})),
                         dag_id="mxbench_benchmark", run_id="deeper", trigger="manual")
    sizes = store.read_sizes(url).sort_values(["run_id", "variant"]).reset_index(drop=True)
    assert list(zip(sizes["run_id"], sizes["variant"])) == [("deeper", "cpu2-bs32"), ("plain", "cpu2-bs32"),
                                                            ("plain", "cpu4-bs32")]  # once per DAG run and variant
    assert list(sizes["devices"]) == [2, 2, 4] and list(sizes["batch_per_device"]) == [32] * 3
    assert list(sizes["kvstore"]) == ["dist_sync"] * 3 and list(sizes["hosts"]) == [1] * 3
    assert list(sizes["depth_override"].astype(object).where(sizes["depth_override"].notna(), None)) == [
        20, None, None]


# --- the command line --------------------------------------------------------------------------

def test_cli_import_then_history(url, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MXBENCH_RESULTS_URL", url)
    old = make_dag_dir(tmp_path / "runs", "manual__2025-old-1a2b3c4d", ok_runs(), run_id="manual__2025-old",
                       ran={"local": {"mxnet_asked": "mxnet==1.9.0", "mxnet_reported": "1.9.1", "runtime": VENV_190}})
    unparsed = tmp_path / "runs" / "half"
    unparsed.mkdir()
    assert cli.main(["import", str(old), str(unparsed)]) == 0
    out = capsys.readouterr()
    assert "manual__2025-old: 2 repeats" in out.out
    assert f"{unparsed} has no tables/runs.csv" in out.err
    assert cli.main(["import", str(old)]) == 0  # again: nothing doubles
    assert count(url, "repeats") == 2
    capsys.readouterr()

    assert cli.main(["history", "cpu2-bs32", "--launcher", "local"]) == 0
    out = capsys.readouterr().out
    assert "manual__2025-old" in out and "100.0" in out and "102.0" in out
    header, *lines = out.splitlines()  # a row's measured_at is two words: date, time
    assert header.split()[4:7] == ["mxnet_package", "build", "runtime"]
    assert len(lines) == 2 and all(line.split()[5:8] == ["-", "1.9.1", VENV_190] for line in lines)

    assert cli.main(["history", "nothing-like-it"]) == 1
    assert capsys.readouterr().err.strip() == "error: no results for variant nothing-like-it"


def test_cli_errors_are_one_line(tmp_path, monkeypatch):
    import subprocess
    import sys

    env = {"MXBENCH_RESULTS_URL": "postgresql+psycopg2://u:secret@127.0.0.1:1/nothing", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "mxbench.cli", "history", "cpu2-bs32"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: cannot reach the results store at postgresql+psycopg2://u:***@")
    assert "secret" not in done.stderr

    done = subprocess.run([sys.executable, "-m", "mxbench.cli", "import", str(tmp_path / "missing")],
                          env={**env, "MXBENCH_RESULTS_URL": f"sqlite:///{tmp_path / 'r.db'}"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'missing'} is not a folder"]


def test_url_of_connection():
    assert store.url_of_connection("postgres://u:p@db:5432/results") == "postgresql+psycopg2://u:p@db:5432/results"
    assert store.url_of_connection("postgresql://u@db/results?__extra__=%7B%7D&sslmode=require") == \
        "postgresql+psycopg2://u@db/results?sslmode=require"
    assert store.url_of_connection("sqlite:////tmp/r.db") == "sqlite:////tmp/r.db"


def test_default_url_is_under_mxbench_home(monkeypatch, tmp_path):
    monkeypatch.delenv("MXBENCH_RESULTS_URL", raising=False)
    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path))
    assert store.default_url() == f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setenv("MXBENCH_RESULTS_URL", "postgresql+psycopg2://x@h/db")
    assert store.default_url() == "postgresql+psycopg2://x@h/db"


def test_a_folder_imported_and_then_recorded_by_the_dag_is_one_dag_run(url, tmp_path):
    dag_dir = make_dag_dir(tmp_path / "runs", "scheduled__2026-01-01-1a2b3c4d", ok_runs())
    (imported,) = store.import_runs(url, [dag_dir])
    assert imported["run_id"] == "scheduled__2026-01-01-1a2b3c4d"
    store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_benchmark", run_id="scheduled__2026-01-01",
                         trigger="scheduled", logical_date=T0)
    assert [r["run_id"] for r in rows(url, "dag_runs")] == ["scheduled__2026-01-01"]
    assert count(url, "repeats") == 2
    (again,) = store.import_runs(url, [dag_dir])  # the DAG's own record wins
    assert again["skipped"].endswith("is already recorded as scheduled__2026-01-01")
    assert rows(url, "dag_runs")[0]["trigger"] == "scheduled"


# --- a DAG run is (dag_id, run_id) -------------------------------------------------------------

SHARED_ID = "scheduled__2026-11-08T00:00:00+00:00"  # the regression DAG's; a manual run may take it too


def test_two_dags_with_one_run_id_are_two_dag_runs(url, tmp_path, monkeypatch):
    monkeypatch.setenv("MXBENCH_BASELINE_DAGS", "mxbench_regression,mxbench_benchmark")
    nightly = make_dag_dir(tmp_path, "nightly", ok_runs(speeds=(100.0, 101.0)))
    store.record_dag_run(url, DagRunFolder(nightly), dag_id="mxbench_regression", run_id=SHARED_ID, trigger="scheduled",
                         logical_date=T0)
    manual = make_dag_dir(tmp_path, "manual", ok_runs(speeds=(300.0,)), started=T0 + timedelta(hours=1))
    store.record_dag_run(url, DagRunFolder(manual), dag_id="mxbench_benchmark", run_id=SHARED_ID, trigger="manual")
    store.record_dag_run(url, DagRunFolder(manual), dag_id="mxbench_benchmark", run_id=SHARED_ID,
                         trigger="manual")  # a retry

    by_dag = {r["dag_id"]: r for r in rows(url, "dag_runs")}
    assert set(by_dag) == {"mxbench_regression", "mxbench_benchmark"}  # the manual run deleted nothing
    assert by_dag["mxbench_regression"]["trigger"] == "scheduled"
    speeds = {(r["dag_id"], r["samples_per_sec"]) for r in rows(url, "repeats")}
    assert speeds == {("mxbench_regression", 100.0), ("mxbench_regression", 101.0), ("mxbench_benchmark", 300.0)}
    history = store.history(url, "cpu2-bs32")
    assert sorted(zip(history["dag_id"], history["samples_per_sec"])) == sorted(speeds)
    nightly_only = store.history(url, dag_ids=["mxbench_regression"])
    assert nightly_only["samples_per_sec"].tolist() == [100.0, 101.0]
    # each is its own DAG run for a baseline: the benchmark run is earlier than nothing of the nightly's
    later = store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=T0 + timedelta(days=1), setup=SETUP)
    assert sorted(later["samples_per_sec"]) == [100.0, 101.0, 300.0]
    before_manual = store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=("mxbench_benchmark", SHARED_ID),
                                   setup=SETUP)
    assert before_manual["samples_per_sec"].tolist() == [100.0, 101.0]  # only itself is left out


def test_upgrade_a_0002_database_keeps_every_row_under_the_dag_that_wrote_it(url, tmp_path):
    """Rows recorded under 0002 (run id the whole key) keep their values; each repeat takes its
    DAG run's dag_id; afterwards the other DAG can store a run of the same id."""
    upgrade_to(url, "0002")
    for dag_id, run_id, folder, speeds in (("mxbench_regression", SHARED_ID, "nightly", (100.0, 101.0)),
                                           ("mxbench_benchmark", "manual__1", "manual", (200.0,))):
        dag_dir = make_dag_dir(tmp_path, folder, ok_runs(speeds=speeds))
        with store.engine(url).begin() as connection:  # as the 0002 code wrote them
            connection.execute(sa.text(
                "INSERT INTO environments (fingerprint, gpu_count, host_class, first_seen) "
                "VALUES (:fp, 0, 'cpu', :now) ON CONFLICT DO NOTHING"), {"fp": CPU_FP, "now": T0})
            connection.execute(sa.text("INSERT INTO variants (id, workers) VALUES ('cpu2-bs32', 2) "
                                       "ON CONFLICT DO NOTHING"))
            connection.execute(sa.text(
                "INSERT INTO dag_runs (run_id, dag_id, trigger, measured_at, state, runs_ok, runs_failed, "
                "environment, folder, recorded_at) "
                "VALUES (:run, :dag, 'manual', :now, 'ok', 1, 0, :fp, :folder, :now)"),
                {"run": run_id, "dag": dag_id, "now": T0, "fp": CPU_FP, "folder": str(dag_dir.resolve())})
            for repeat, speed in enumerate(speeds, 1):
                connection.execute(sa.text(
                    "INSERT INTO repeats (dag_run, run_key, variant, launcher, machine_set, repeat, environment, "
                    "status, samples_per_sec) VALUES (:run, :key, 'cpu2-bs32', 'local', 'local', :repeat, :fp, 'ok', "
                    ":speed)"), {"run": run_id, "key": f"cpu2-bs32__local__r{repeat}", "repeat": repeat,
                                 "fp": CPU_FP, "speed": speed})

    assert store.migrate(url) == HEAD
    assert sorted((r["dag_id"], r["run_id"]) for r in rows(url, "dag_runs")) == [
        ("mxbench_benchmark", "manual__1"), ("mxbench_regression", SHARED_ID)]
    repeat_rows = rows(url, "repeats")
    assert sorted((r["dag_id"], r["dag_run"], r["samples_per_sec"], r["machine_set"]) for r in repeat_rows) == [
        ("mxbench_benchmark", "manual__1", 200.0, "local"),
        ("mxbench_regression", SHARED_ID, 100.0, "local"), ("mxbench_regression", SHARED_ID, 101.0, "local")]
    # new rows after the copied ones get new ids (PostgreSQL's sequence went on past them)
    manual = make_dag_dir(tmp_path, "manual-2", ok_runs(speeds=(300.0,)))
    store.record_dag_run(url, DagRunFolder(manual), dag_id="mxbench_benchmark", run_id=SHARED_ID, trigger="manual")
    assert len(rows(url, "dag_runs")) == 3 and count(url, "repeats") == 4
    assert len({r["id"] for r in rows(url, "repeats")}) == 4
    # deleting a DAG run still takes its repeats with it (the foreign key over both columns)
    with store.engine(url).begin() as connection:
        connection.execute(sa.text("DELETE FROM dag_runs WHERE dag_id = 'mxbench_benchmark'"))
    assert sorted(r["samples_per_sec"] for r in rows(url, "repeats")) == [100.0, 101.0]


def test_downgrade_to_0002_keeps_the_rows(url, tmp_path):
    store.record_dag_run(url, DagRunFolder(make_dag_dir(tmp_path, "run1", ok_runs())), dag_id="mxbench_regression",
                         run_id=SHARED_ID, trigger="scheduled")
    with store.engine(url).begin() as connection:
        command.downgrade(store.alembic_config(connection), "0002")
        assert "dag_id" not in {c["name"] for c in sa.inspect(connection).get_columns("repeats")}
    assert [(r["dag_run"], r["samples_per_sec"]) for r in rows(url, "repeats")] == [(SHARED_ID, 100.0),
                                                                                    (SHARED_ID, 102.0)]
    assert store.migrate(url) == HEAD and count(url, "repeats") == 2


def test_import_keeps_the_dag_a_folder_names(url, tmp_path):
    nightly = make_dag_dir(tmp_path / "runs", "old-nightly-1a2b3c4d", ok_runs(), run_id=SHARED_ID)
    request = json.loads((nightly / "request.json").read_text())
    (nightly / "request.json").write_text(json.dumps({**request, "dag_id": "mxbench_regression"}))
    older = make_dag_dir(tmp_path / "runs", "older-5e6f7a8b", ok_runs(), run_id=SHARED_ID)  # no dag_id: the benchmark's
    results = store.import_runs(url, [nightly, older])
    assert [(r["dag_id"], r["run_id"]) for r in results] == [("mxbench_regression", SHARED_ID),
                                                             ("mxbench_benchmark", SHARED_ID)]
    assert count(url, "dag_runs") == 2 and count(url, "repeats") == 4


# --- passwords ---------------------------------------------------------------------------------

SECRET = "s3cr3t-pw"
BAD_URLS = [f"u:{SECRET}@db.example/results",  # no scheme: SQLAlchemy cannot parse it
            f"postgresql+psycopg2://u:{SECRET}@db.example:port/results",  # a port that is not a number
            f"postgresql+psycopg2://u:{SECRET}@127.0.0.1:1/results"]  # nobody listening


@pytest.mark.parametrize("bad", BAD_URLS)
def test_no_store_error_quotes_a_password(bad, tmp_path):
    dag_dir = make_dag_dir(tmp_path, "run1", ok_runs())
    calls = [lambda: store.migrate(bad), lambda: store.history(bad, "cpu2-bs32"), lambda: store.read_history(bad),
             lambda: store.record_dag_run(bad, DagRunFolder(dag_dir), dag_id="d", run_id="r", trigger="manual")]
    for call in calls:
        with pytest.raises(store.StoreError) as raised:
            call()
        assert SECRET not in str(raised.value)
        assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no chained original
    assert SECRET not in store.shown(bad)
    with pytest.raises(store.StoreError) as raised:
        store.url_of_connection(f"postgres://u:{SECRET}@db.example:port/x")
    assert SECRET not in str(raised.value)


def test_without_password_hides_every_spelling_of_it():
    url = "postgresql+psycopg2://u:p%40ss%2Fw@db/results"
    text = f"driver said: bad url {url}; password p@ss/w rejected; dsn password=p%40ss%2Fw"
    shown = store.without_password(text, url)
    assert "p@ss/w" not in shown and "p%40ss%2Fw" not in shown and "u:***@db/results" in shown


def test_the_store_task_writes_no_password_to_stored_json_its_log_or_the_dag_failure(tmp_path, monkeypatch, capsys):
    import traceback
    from types import SimpleNamespace

    from mxbench import config
    from mxbench.airflow_glue import dag_tasks
    from mxbench.report import build_report
    from mxbench.stages import dag_run_failures, pipeline

    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path))
    monkeypatch.setenv("MXBENCH_RESULTS_URL", BAD_URLS[0])
    dag_dir = config.dag_run_dir("mxbench_benchmark", "manual__1")
    make_dag_dir(dag_dir.parent, dag_dir.name, ok_runs())
    pipeline.join(DagRunFolder(dag_dir))
    build_report(DagRunFolder(dag_dir))  # the report task, which runs beside store_results
    dag_run = SimpleNamespace(dag_id="mxbench_benchmark", run_type="manual", logical_date=None,
                              data_interval_start=None, data_interval_end=None)
    with pytest.raises(store.StoreError) as raised:
        dag_tasks.store_results.function({}, params={}, dag_run=dag_run, run_id="manual__1")
    printed = capsys.readouterr()
    log = "".join(traceback.format_exception(raised.value)) + printed.out + printed.err
    stored = (dag_dir / "stored.json").read_text()
    assert "not a database URL" in stored and "not a database URL" in log
    assert SECRET not in stored and SECRET not in log
    failure = dag_run_failures.failure_message(DagRunFolder(dag_dir))  # what check_runs fails the DAG run with
    assert "storing the results in the results database failed" in failure and SECRET not in failure


def test_a_short_password_is_redacted_only_where_it_stands_as_a_password():
    url = "postgresql+psycopg2://alice:a@db.example/results"
    text = (f"cannot reach {url}: a timeout at db.example (dsn user=alice password=a); "
            "also tried postgresql://alice:a@db.example/results")
    assert store.without_password(text, url) == (
        "cannot reach postgresql+psycopg2://alice:***@db.example/results: a timeout at db.example "
        "(dsn user=alice password=***); also tried postgresql://alice:***@db.example/results")


def test_the_regression_check_quotes_no_password_of_a_store_that_fails_under_it(tmp_path, monkeypatch):
    """A driver's error from the baseline query may quote the URL: check_regression redacts it as
    store_results does (a failing driver is injected here; the store task, the redaction are real)."""
    import traceback
    from types import SimpleNamespace

    from mxbench import config
    from mxbench.airflow_glue import dag_tasks

    monkeypatch.setenv("MXBENCH_HOME", str(tmp_path))
    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setenv("MXBENCH_RESULTS_URL", url)
    dag_run = SimpleNamespace(dag_id="mxbench_regression", run_type="scheduled", logical_date=T0,
                              data_interval_start=T0, data_interval_end=T0)
    dag_dir = config.dag_run_dir("mxbench_regression", "scheduled__1")
    make_dag_dir(dag_dir.parent, dag_dir.name, ok_runs())
    stored = dag_tasks.store_results.function({}, params={}, dag_run=dag_run, run_id="scheduled__1")
    secret_url = f"postgresql+psycopg2://u:{SECRET}@db.example/results"
    monkeypatch.setenv("MXBENCH_RESULTS_URL", secret_url)

    def driver_failure(url, *args, **kwargs):
        try:
            raise ConnectionError(f"lost {url} mid-query")
        except ConnectionError as lost:
            raise sa.exc.OperationalError("SELECT ...", {}, lost) from lost

    # the check's first reads: the DAG run's time (for triaged alerts), then the baselines
    monkeypatch.setattr(store, "dag_run_time", driver_failure)
    monkeypatch.setattr(store, "baseline", driver_failure)
    with pytest.raises(store.StoreError) as raised:
        dag_tasks.check_regression.function(stored, params={"baseline_runs": 3, "min_drop": 0.05},
                                         run_id="scheduled__1", dag_run=dag_run)
    log = "".join(traceback.format_exception(raised.value))
    assert "lost postgresql+psycopg2://u:***@db.example/results mid-query" in log and SECRET not in log


def test_a_bisects_probes_of_old_builds_are_never_a_baseline(url, tmp_path):
    """mxbench_bisect measures old builds on purpose, after the nights it bisects: the baseline of
    the next night is the nights before it, not the probes."""
    for day, (dag_id, speed) in enumerate([("mxbench_regression", 100.0), ("mxbench_regression", 100.0),
                                           ("mxbench_bisect", 200.0), ("mxbench_bisect", 200.0)]):
        dag_dir = make_dag_dir(tmp_path, f"d{day}", ok_runs(speeds=(speed, speed)), started=T0 + timedelta(days=day))
        store.record_dag_run(url, DagRunFolder(dag_dir), dag_id=dag_id, run_id=f"run{day}", trigger="manual",
                             logical_date=T0 + timedelta(days=day))
    baseline = store.baseline(url, "cpu2-bs32", "local", CPU_FP, before=T0 + timedelta(days=9), setup=SETUP)
    assert set(baseline["run_id"]) == {"run0", "run1"} and set(baseline["samples_per_sec"]) == {100.0}


def test_a_runs_interference_is_stored_and_the_history_page_counts_contended_dag_runs(url, tmp_path):
    """Revision 0009: the worst host's pressure, steal and CPU used outside the run, and whether it
    was contended; a folder from before interference was measured stores NULL."""
    from mxbench.report.pages import history_page

    dag_dir = make_dag_dir(tmp_path, "busy", ok_runs())
    runs_csv = dag_dir / "tables" / "runs.csv"
    table = pd.read_csv(runs_csv).assign(cpu_pressure=[0.4, 0.1], steal=[0.0, 0.01], foreign_cores=[0.9, 0.02],
                                         contended=[True, False])
    table.to_csv(runs_csv, index=False)
    store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_benchmark", run_id="manual__1", trigger="manual",
                         build={})
    old = make_dag_dir(tmp_path, "old", ok_runs())
    store.record_dag_run(url, DagRunFolder(old), dag_id="mxbench_benchmark", run_id="manual__0", trigger="manual",
                         build={})
    stored = {(r["dag_run"], r["repeat"]): r for r in rows(url, "repeats")}
    assert stored["manual__1", 1]["contended"] == 1 and stored["manual__1", 1]["foreign_cores"] == 0.9
    assert stored["manual__1", 2]["contended"] == 0 and stored["manual__1", 2]["steal"] == 0.01
    assert stored["manual__0", 1]["contended"] is None and stored["manual__0", 1]["cpu_pressure"] is None
    history = store.read_history(url)
    assert history["contended"].astype(object).tolist().count(True) == 1
    page = history_page(history.assign(verdict="ok", when=history["measured_at"]), "the store")
    assert "<th>contended DAG runs</th>" in page
    counts = re.findall(r"<td>(\d+)</td>\s*</tr>", page)
    assert counts and counts[-1] == "1"  # one of the two DAG runs of the series had a contended run


def test_the_contention_thresholds_come_from_each_machines_latest_aa_calibrations(url, tmp_path, capsys):
    """``aa_interference``: the measured runs of DAG runs with an arm b, per kind of machine, its
    latest calibrations only; ``pipeline.contention_thresholds`` makes the table a DAG run judges with."""
    import numpy as np

    from mxbench.results import contention
    from mxbench.stages import pipeline

    def planted(name, launchers, foreign, environment=CPU_BOX, day=0, steal=0.0):
        dag_dir = make_dag_dir(tmp_path, name, ok_runs(launchers=launchers, speeds=[100.0] * 4),
                               environment=environment, started=T0 + timedelta(days=day))
        runs_csv = dag_dir / "tables" / "runs.csv"
        pd.read_csv(runs_csv).assign(foreign_cores=foreign, steal=steal).to_csv(runs_csv, index=False)
        store.record_dag_run(url, DagRunFolder(dag_dir), dag_id="mxbench_benchmark", run_id=name, trigger="manual",
                             build={},
                             logical_date=T0 + timedelta(days=day))

    rng = np.random.default_rng(7)
    seen = {day: rng.uniform(0.05, 0.2, 8) for day in range(3)}
    for day, foreign in seen.items():  # three calibrations on the CPU box, 8 runs each
        planted(f"aa{day}", ("local", "local-b"), foreign, day=day)
    planted("not-aa", ("local", "ssh"), [3.0] * 8, day=5)  # no arm b: no calibration, whatever it saw
    unread = [None] * 4  # runs from before interference was measured read nothing
    planted("other-aa", ("local", "local-b"), [0.01] * 4 + unread, environment=OTHER_CPU_BOX, day=6,
            steal=[0.0] * 4 + unread)

    rows = store.aa_interference(url)
    assert set(rows["environment"]) == {CPU_FP, OTHER_FP} and "not-aa" not in set(rows["dag_run"])
    assert len(rows[rows["environment"] == CPU_FP]) == 24 and len(rows[rows["environment"] == OTHER_FP]) == 4
    assert set(rows["launcher"]) == {"local"}  # an arm b is its launcher
    latest = store.aa_interference(url, latest=2)  # each machine's two newest calibrations
    assert set(latest.loc[latest["environment"] == CPU_FP, "dag_run"]) == {"aa1", "aa2"}

    table = pipeline.contention_thresholds(url)
    assert set(table) == {contention.table_key(CPU_FP, "local"), contention.table_key(OTHER_FP, "local")}
    cpu = contention.Thresholds.from_dict(table[contention.table_key(CPU_FP, "local")])
    # the lowest of all 24 runs' level and of those left with any one calibration out
    levels = [2 * np.percentile(np.concatenate([v for d, v in seen.items() if d != out]), 90)
              for out in (None, 0, 1, 2)]
    assert cpu.foreign_cores == pytest.approx(min(levels), abs=1e-3)
    assert cpu.source == ("from 24 A/A runs on this hardware (3 calibrations of mxbench_benchmark): a factor over "
                          "their 90th percentile, no single calibration loosening them; own cgroup waiting, canary, "
                          "host-wide pressure default")
    other = contention.Thresholds.from_dict(table[contention.table_key(OTHER_FP, "local")])  # 4 runs: too few
    assert (other.foreign_cores, other.steal) == (contention.FOREIGN_CORES, contention.STEAL)
    assert other.source.startswith("defaults: 4 A/A run(s)")
    # a store that cannot be read: no table (the defaults judge), said without the password
    assert pipeline.contention_thresholds("postgresql+psycopg2://mxbench:s3cret@127.0.0.1:1/results") == {}
    out = capsys.readouterr().out
    assert "contention thresholds: the defaults, the results store could not be read" in out and "s3cret" not in out


def test_reading_the_aa_interference_never_makes_or_upgrades_the_store(tmp_path):
    """Read at expand time: a store not there yet, or from before revision 0009, gives no rows."""
    missing = tmp_path / "none.db"
    assert store.aa_interference(f"sqlite:///{missing}").empty and not missing.exists()
    old = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade_to(old, "0008")
    assert store.aa_interference(old).empty
    with store.engine(old).connect() as connection:
        assert "foreign_cores" not in {c["name"] for c in sa.inspect(connection).get_columns("repeats")}
    before_felt = f"sqlite:///{tmp_path / 'nine.db'}"  # revision 0009: no run_pressure, canary_s yet
    upgrade_to(before_felt, "0009")
    found = store.aa_interference(before_felt)
    assert found.empty and {"run_pressure", "canary_s"} <= set(found.columns)


def test_only_trusted_quiet_calibrations_feed_the_thresholds_a_regression_run_is_judged_by(url, tmp_path, monkeypatch):
    """Issue 40 §2: an untrusted DAG's noisy calibration, and a trusted one whose runs were judged
    contended, leave the thresholds where the quiet trusted calibrations put them (one untrusted
    calibration alone could not loosen them either: ``from_aa``'s leave-one-out); a regression run
    with 0.8 cores of other work and 15% steal, judged with what its DAG run expanded with, is
    contended. The same store with the untrusted DAG trusted (MXBENCH_CALIBRATION_DAGS) loosens them."""
    import numpy as np

    from mxbench.matrix.variants import Target
    from mxbench.results import contention
    from mxbench.stages import pipeline

    rng = np.random.default_rng(11)

    def planted(name, dag_id, foreign, steal, contended, day, pressure=None, canary=None):
        dag_dir = make_dag_dir(tmp_path, name, ok_runs(launchers=("local", "local-b"), speeds=[100.0] * 4),
                               started=T0 + timedelta(days=day))
        runs_csv = dag_dir / "tables" / "runs.csv"
        pd.read_csv(runs_csv).assign(foreign_cores=foreign, steal=steal, contended=contended, run_pressure=pressure,
                                     canary_s=canary).to_csv(runs_csv, index=False)
        store.record_dag_run(url, DagRunFolder(dag_dir), dag_id=dag_id, run_id=name, trigger="manual", build={},
                             logical_date=T0 + timedelta(days=day))

    for day in range(2):  # two quiet calibrations of the operators' DAG
        planted(f"quiet{day}", "mxbench_benchmark", rng.uniform(0.01, 0.03, 8), rng.uniform(0.0, 0.005, 8), False, day,
                rng.uniform(0.05, 0.15, 8), rng.uniform(0.30, 0.32, 8))
    for day in (3, 4):  # a trigger user's DAG calibrating in a busy week, twice: 0.45 cores of other work, 18% steal
        planted(f"noisy{day}", "someone_elses_dag", [0.45] * 8, [0.18] * 8, False, day, [0.8] * 8, [0.6] * 8)
    planted("hogged", "mxbench_benchmark", [0.9] * 8, [0.15] * 8, True, 5, [0.9] * 8, [0.7] * 8)  # judged contended

    def judged(dag_dir):
        dag_dir.mkdir()
        pipeline.expand({"preset": "cpu-demo", "repeats": 1, "only_variants": ["cpu1-bs32"]}, DagRunFolder(dag_dir),
                        {"local": Target("local", 1, 0)}, dag_id="mxbench_regression",
                        contention=pipeline.contention_thresholds(url))
        return contention.thresholds_for(pipeline.contention_table(DagRunFolder(dag_dir)), CPU_BOX, "local")

    monkeypatch.delenv("MXBENCH_CALIBRATION_DAGS", raising=False)
    trusted = judged(tmp_path / "regression")
    assert "2 calibrations of mxbench_benchmark" in trusted.source
    assert trusted.foreign_cores < 0.1 and trusted.steal < 0.02 and trusted.run_pressure < 0.3
    busy = {"event": "run_end", "host": {"host": "box", "wall_s": 10.0, "foreign_cpu_s": 8.0, "steal": 0.15}}
    row = contention.summarise([busy], trusted)
    assert row["contended"] is True and row["contention"] == "other processes used 0.80 cores; steal 15%"
    assert str(trusted) in row["contention_thresholds"]  # the report's thresholds line names the source

    monkeypatch.setenv("MXBENCH_CALIBRATION_DAGS", "mxbench_benchmark, someone_elses_dag")
    loosened = judged(tmp_path / "trusting")
    assert loosened.foreign_cores > 0.8 and loosened.steal > 0.15  # two of them: what the setting guards against
    assert contention.summarise([busy], loosened)["contended"] is False
    monkeypatch.setenv("MXBENCH_CALIBRATION_DAGS", "none")
    assert judged(tmp_path / "none") == contention.DEFAULTS
