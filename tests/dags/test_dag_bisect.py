"""mxbench_bisect: the DAG file loads with its edges and trigger form, and its own tasks, chained
DAG run to DAG run through the conf they trigger with, find a planted step among 8 builds of a
manifest in at most 3 probes (the measuring tasks replaced by planted store rows)."""
import copy
import json
import os
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from conftest import QUIET_WAIT_S
from mxbench import store
from mxbench.airflow_glue import bisect_tasks
from mxbench.builds import mxnet_builds

# 8 builds: release wheels, and commits between them built from source (their image) or as a wheel
MANIFEST = [
    {"since": "2026-09-01", "package": "mxnet==1.6.0", "image": "mxbench-train:1.6.0"},
    {"since": "2026-09-10", "package": "mxnet==1.6.0", "image": "mxbench-train:src-1111111", "commit": "1111111"},
    {"since": "2026-09-20", "package": "mxnet==1.6.0", "image": "mxbench-train:src-2222222", "commit": "2222222"},
    {"since": "2026-10-01", "package": "mxnet==1.7.0.post2", "image": "mxbench-train:1.7.0"},
    {"since": "2026-10-10", "package": "mxnet @ https://w.example/mxnet-1.7.0-py3-none-any.whl",
     "sha256": "ab" * 32, "image": "mxbench-train:src-3333333", "commit": "3333333"},
    {"since": "2026-10-15", "package": "mxnet==1.8.0.post0", "image": "mxbench-train:1.8.0"},
    {"since": "2026-11-04", "package": "mxnet==1.9.0", "image": "mxbench-train:1.9.0"},
    {"since": "2026-11-08", "package": "mxnet==1.9.1", "image": "mxbench-train:1.9.1"},
]


@pytest.fixture(scope="module")
def dag():
    from airflow.dag_processing.dagbag import DagBag

    from conftest import REPO

    bag = DagBag(dag_folder=str(REPO / "dags" / "mxbench_bisect.py"))
    assert bag.import_errors == {}
    return bag.dags["mxbench_bisect"]


def test_structure(dag):
    edges = {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}
    assert {("resolve_probe", "expand_variants"), ("store_results", "decide"), ("decide", "more_to_probe"),
            ("more_to_probe", "next_probe"), ("decide", "report"), ("report", "check_runs")} <= edges
    assert dag.schedule is None and dag.max_active_runs == 1
    trigger = dag.get_task("next_probe")
    assert trigger.trigger_dag_id == "mxbench_bisect"
    # a next probe's run id made first by someone else stops the chain loudly, never silently;
    # no retry that would find the chain's own DAG run and fail for nothing
    assert trigger.skip_when_already_exists is False and trigger.reset_dag_run is False and trigger.retries == 0
    assert dag.get_task("decide").trigger_rule == "all_done"  # a failed probe is still decided on


def test_the_trigger_form_needs_good_and_bad_builds_and_one_variant(dag):
    def validate(**conf):
        params = copy.deepcopy(dag.params)  # setting a value sets the DAG's own Param's
        for key, value in conf.items():
            params[key] = value
        return params.validate()

    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="good_build"):
        validate(bad_build="1.9.1")
    assert validate(good_build="1.9.0", bad_build="1.9.1")["only_variants"] == ["cpu1-bs64"]
    with pytest.raises(ParamValidationError, match=r"only_variants.*too long"):
        validate(good_build="1.9.0", bad_build="1.9.1", only_variants=["cpu1-bs64", "cpu2w-bs64"])
    with pytest.raises(ParamValidationError, match=r"launchers.*too long"):
        validate(good_build="1.9.0", bad_build="1.9.1", launchers=["local", "ssh"])
    with pytest.raises(ParamValidationError, match=r"bisect_runs.*'run_id' is a required property"):
        validate(good_build="1.9.0", bad_build="1.9.1", bisect_runs=[{"build": "1.9.0"}])


@pytest.fixture(autouse=True)
def results_store(tmp_path, monkeypatch):
    """A results store of each test's own: bisect chains are kept there."""
    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setenv("MXBENCH_RESULTS_URL", url)
    return url


@pytest.fixture
def manifest(tmp_path, monkeypatch):
    path = tmp_path / "mxnet-builds.json"
    path.write_text(json.dumps(MANIFEST))
    monkeypatch.setattr(mxnet_builds, "MANIFEST", path)
    return mxnet_builds.load_manifest(path)


def bisect_by_dag_runs(dag, monkeypatch, conf, speed_of, failing=(), limit=10):
    """Each DAG run: resolve_probe, planted repeats stored for its build, decide; the next DAG
    run's params are the conf decide hands the trigger, validated by the DAG's form."""
    rows = []
    monkeypatch.setattr(store, "history", lambda url, variant=None, launcher=None, dag_ids=None: pd.DataFrame(
        rows, columns=["run_id", "variant", "launcher", "status", "samples_per_sec"]))
    rng = np.random.default_rng(7)
    records = []
    for n in range(limit):
        params = copy.deepcopy(dag.params)
        for key, value in conf.items():
            params[key] = value
        params = params.validate()
        run_id = f"manual__{n}"
        record = bisect_tasks.resolve_probe.function(params=params, run_id=run_id,
                                                     dag_run=SimpleNamespace(dag_id=dag.dag_id))
        records.append(record)
        if record["label"] not in failing:
            rows.extend((run_id, "cpu1-bs64", "kubernetes", "ok", speed_of(record["label"]) * rng.lognormal(0, 0.03))
                        for _ in range(params["repeats"]))
        decision = bisect_tasks.decide.function(record, params=params, run_id=run_id,
                                                dag_run=SimpleNamespace(dag_id=dag.dag_id))
        if decision["done"]:
            return decision, records
        conf = decision["next_conf"]
    raise AssertionError(f"not done after {limit} DAG runs")


@pytest.mark.parametrize("step_at", range(1, 8))
def test_dag_runs_find_a_planted_step_in_at_most_3_probes(dag, manifest, monkeypatch, capsys, step_at):
    from mxbench.regression import bisect

    labels = [bisect.label(b) for b in manifest]
    conf = {"good_build": "2026-09-01", "bad_build": "1.9.1", "launchers": ["kubernetes"]}
    speed_of = lambda label: 100.0 * (0.8 if labels.index(label) >= step_at else 1.0)  # noqa: E731
    decision, records = bisect_by_dag_runs(dag, monkeypatch, conf, speed_of)
    assert decision["first_bad"] == labels[step_at]
    assert records[0]["label"] == labels[0]  # the first DAG run measures the reference
    assert len(decision["path"]) == len(records) - 1 <= 3
    assert "probe path:" in capsys.readouterr().out
    # each DAG run's report gets the probe path so far, and the next probe a run id of its own
    from mxbench import config

    shown = json.loads((config.dag_run_dir("mxbench_bisect", f"manual__{len(records) - 1}") / "tables"
                        / "bisect.json").read_text())
    assert len(shown["path"]) == len(decision["path"]) + 1 and shown["path"][-1] == decision["message"]
    # were there a next one: named by the chain's first DAG run, with a random part nobody can guess
    assert re.fullmatch(rf"manual__0__probe{len(records)}__[0-9a-f]{{8}}", decision["next_run_id"])
    # what the store records of each DAG run's build: the commit of a build that has one
    assert all(r["commit"] == manifest[labels.index(r["label"])].commit for r in records)


def test_a_probe_that_measures_nothing_is_said_and_a_neighbour_measured(dag, manifest, monkeypatch, capsys):
    from mxbench.regression import bisect

    labels = [bisect.label(b) for b in manifest]
    speed_of = lambda label: 100.0 * (0.8 if labels.index(label) >= 5 else 1.0)  # noqa: E731
    decision, records = bisect_by_dag_runs(dag, monkeypatch, {"good_build": "1.6.0", "bad_build": "1.9.1",
                                                               "launchers": ["kubernetes"]},
                                           speed_of, failing={labels[3]})
    assert decision["first_bad"] == labels[5]
    assert decision["path"][0] == {"build": labels[3], "status": "failed", "change": None,
                                   "message": decision["path"][0]["message"]}
    assert "probing a neighbour" in capsys.readouterr().out


def test_a_bad_pair_of_builds_fails_the_dag_run_naming_it(dag, manifest):
    from airflow.sdk.exceptions import AirflowFailException

    params = {"good_build": "1.9.1", "bad_build": "1.6.0", "launchers": ["kubernetes"], "probe_build": ""}
    with pytest.raises(AirflowFailException, match=r"must come before the bad build"):
        bisect_tasks.resolve_probe.function(params=params, run_id="manual__1",
                                            dag_run=SimpleNamespace(dag_id="mxbench_bisect"))
    with pytest.raises(AirflowFailException, match=r"'mxnet==1\.6\.0' names 3 builds .*name one by its since date"):
        bisect_tasks.resolve_probe.function(params={**params, "good_build": "mxnet==1.6.0", "bad_build": "1.9.1"},
                                            run_id="manual__1", dag_run=SimpleNamespace(dag_id="mxbench_bisect"))
    with pytest.raises(AirflowFailException, match=r"no build '2\.0\.0' in the versions manifest"):
        bisect_tasks.resolve_probe.function(params={**params, "good_build": "2.0.0"}, run_id="manual__1",
                                            dag_run=SimpleNamespace(dag_id="mxbench_bisect"))


def test_the_form_has_no_baseline_knobs(dag):
    """A probe is judged against the good build's DAG run: the regression DAG's baseline (and the
    confirmation rounds its baseline decides on) would judge it against other DAG runs."""
    assert {"good_build", "bad_build", "repeats", "min_drop"} <= set(dag.params)
    assert not {"baseline_runs", "confirm_rounds"} & set(dag.params)


@pytest.mark.slow  # dag.test() of one DAG run that trains
def test_one_real_dag_run_measures_the_reference_and_triggers_the_next_probe(airflow_db, tmp_path, monkeypatch,
                                                                              capsys):
    """The pinned build (the training env) as the good build, two source-only commits after it: the
    first DAG run trains the reference for real, stores it and triggers the midpoint's DAG run."""
    import os

    from airflow.dag_processing.dagbag import DagBag

    from conftest import REPO

    path = tmp_path / "mxnet-builds.json"
    path.write_text(json.dumps([
        {"since": "2026-01-01", "package": "mxnet==1.9.1", "image": "mxbench-train:1.9.1"},
        {"since": "2026-02-01", "package": "mxnet==1.9.1", "image": "mxbench-train:src-1234567", "commit": "1234567"},
        {"since": "2026-03-01", "package": "mxnet==1.9.1", "image": "mxbench-train:src-89abcde", "commit": "89abcde"},
    ]))
    monkeypatch.setattr(mxnet_builds, "MANIFEST", path)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setitem(os.environ, "MXBENCH_RESULTS_URL", url)
    dag = DagBag(dag_folder=str(REPO / "dags" / "mxbench_bisect.py")).dags["mxbench_bisect"]
    run = dag.test(run_conf={"good_build": "1.9.1", "bad_build": "89abcde", "repeats": 4, "epochs": 1,
                             "synthetic_images": 500, "quiet_wait_s": QUIET_WAIT_S})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["decide"] == "success" and states["next_probe"] == "success", states
    history = store.history(url, "cpu1-bs64", launcher="local")
    assert set(history["run_id"]) == {run.run_id} and (history["status"] == "ok").sum() == 4
    out = capsys.readouterr().out
    assert "probe 1.9.1+1234567: the first bad build is after 1.9.1 and at or before 1.9.1+89abcde" in out

    # the DAG run it triggered carries the bisect's state; run as dag.test() would: the local
    # launcher cannot run a source-only commit, so the probe fails and no build is guessed
    from airflow.models.dagrun import DagRun

    triggered = [r for r in DagRun.find(dag_id="mxbench_bisect") if r.run_id != run.run_id]
    assert len(triggered) == 1
    conf = triggered[0].conf
    assert conf["probe_build"] == "1.9.1+1234567"
    assert conf["bisect_runs"] == [{"build": "1.9.1", "run_id": run.run_id}]
    second = dag.test(run_conf=conf)
    states = {ti.task_id: ti.state for ti in second.get_task_instances()}
    assert states["decide"] == "success" and states["next_probe"] == "skipped", states
    out = capsys.readouterr().out
    assert "1. 1.9.1+1234567: failed" in out
    assert "cannot name the first bad build: 1.9.1+1234567 failed to measure; it is one of 1.9.1+1234567, " \
           "1.9.1+89abcde (after 1.9.1)" in out
    # the results store records each DAG run's build, with the commit of one that names it
    stored = store.history(url, "cpu1-bs64", launcher="local").groupby("run_id")["mxnet_commit"].first()
    assert pd.isna(stored[run.run_id]) and stored[second.run_id] == "1234567" and len(stored) == 2


@pytest.mark.slow  # dag.test() of one DAG run that trains
def test_a_next_probe_run_id_made_first_by_someone_else_fails_the_trigger_loudly(airflow_db, tmp_path, monkeypatch):
    """The attack: a trigger user creates the chain's next run id first, with a conf of their own. The
    chain's trigger fails (it used to be skipped: the bisect stopped silently, theirs carried on).
    After the test above, which counts the DAG runs in the metadata DB."""
    import os
    from datetime import datetime, timezone

    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunType

    from conftest import REPO

    path = tmp_path / "mxnet-builds.json"
    path.write_text(json.dumps([
        {"since": "2026-01-01", "package": "mxnet==1.9.1", "image": "mxbench-train:1.9.1"},
        {"since": "2026-02-01", "package": "mxnet==1.9.1", "image": "mxbench-train:src-1234567", "commit": "1234567"},
        {"since": "2026-03-01", "package": "mxnet==1.9.1", "image": "mxbench-train:src-89abcde", "commit": "89abcde"},
    ]))
    monkeypatch.setattr(mxnet_builds, "MANIFEST", path)
    monkeypatch.setitem(os.environ, "MXBENCH_RESULTS_URL", f"sqlite:///{tmp_path / 'results.db'}")
    dag = DagBag(dag_folder=str(REPO / "dags" / "mxbench_bisect.py")).dags["mxbench_bisect"]
    when = datetime(2026, 12, 1, tzinfo=timezone.utc)
    first_id = DagRun.generate_run_id(run_type=DagRunType.MANUAL, logical_date=when, run_after=when)
    # the next probe's run id has a part nobody can guess: the attacker is handed the one it will get
    monkeypatch.setattr(store, "run_id_for", lambda row, prefix, step: f"{prefix}__feedface")
    theirs = {"good_build": "1.9.1", "bad_build": "89abcde", "probe_build": "1.9.1+89abcde",
              "bisect_runs": [{"build": "1.9.1", "run_id": first_id}], "min_drop": 0.9}
    with create_session() as session:
        session.add(DagRun(dag_id="mxbench_bisect", run_id=f"{first_id}__probe1__feedface",
                           run_type=DagRunType.MANUAL, conf=theirs, run_after=when, state=DagRunState.QUEUED))
    # dag.test() builds a failed DAG run's callback context from the DAG's params without the run's
    # conf (good_build has no default): not what this test is about
    monkeypatch.setattr(DagRun, "execute_dag_callbacks", lambda *args, **kwargs: None)
    run = dag.test(logical_date=when, run_after=when,
                   run_conf={"good_build": "1.9.1", "bad_build": "89abcde", "repeats": 4, "epochs": 1,
                             "synthetic_images": 500, "quiet_wait_s": QUIET_WAIT_S})
    assert run.run_id == first_id
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["decide"] == "success" and states["next_probe"] == "failed", states
    (pre_empted,) = DagRun.find(dag_id="mxbench_bisect", run_id=f"{first_id}__probe1__feedface")
    assert pre_empted.conf == theirs  # theirs is left as it is, and the chain says it was stopped


@pytest.mark.slow  # two venvs of real MXNet wheels (pip, network or its cache) and two DAG runs that train
def test_a_bisect_over_three_real_mxnet_versions(airflow_db, tmp_path, monkeypatch, capsys):
    """mxnet 1.8.0.post0 (good) .. 1.9.0 (a local wheel file with its sha256 and a planted commit)
    .. 1.9.1 (bad, the training env): the reference and the one probe train for real, each in its
    build's venv, and the bisect names a first bad build from what they measured."""
    import hashlib
    import os
    import subprocess

    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.dagrun import DagRun

    from conftest import REPO, train_python

    wheels = tmp_path / "wheels"
    subprocess.run([train_python(), "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
                    "-d", str(wheels), "mxnet==1.9.0"], check=True, timeout=600)
    (wheel,) = wheels.glob("mxnet-1.9.0-*.whl")
    real = json.loads((REPO / "config" / "mxnet-builds.json").read_text())
    by_package = {entry["package"]: entry for entry in real}
    path = tmp_path / "mxnet-builds.json"
    path.write_text(json.dumps([
        by_package["mxnet==1.8.0.post0"],
        {"since": "2026-11-04", "package": f"wheels/{wheel.name}", "image": "mxbench-train:1.9.0-cu112",
         "commit": "fedcba9876", "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()},
        by_package["mxnet==1.9.1"],
    ]))
    monkeypatch.setattr(mxnet_builds, "MANIFEST", path)
    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.setitem(os.environ, "MXBENCH_RESULTS_URL", url)
    dag = DagBag(dag_folder=str(REPO / "dags" / "mxbench_bisect.py")).dags["mxbench_bisect"]
    before = {r.run_id for r in DagRun.find(dag_id="mxbench_bisect")}
    first = dag.test(run_conf={"good_build": "1.8.0.post0", "bad_build": "1.9.1", "repeats": 4, "epochs": 1,
                               "synthetic_images": 500, "quiet_wait_s": QUIET_WAIT_S})
    assert first.state == "success"
    (triggered,) = [r for r in DagRun.find(dag_id="mxbench_bisect") if r.run_id not in before | {first.run_id}]
    assert triggered.conf["probe_build"] == "1.9.0+fedcba9876"
    second = dag.test(run_conf=triggered.conf)
    assert second.state == "success"
    states = {ti.task_id: ti.state for ti in second.get_task_instances()}
    assert states["next_probe"] == "skipped", states  # one probe decides among three builds
    out = capsys.readouterr().out
    assert "1. 1.9.0+fedcba9876: " in out
    named = "1.9.0+fedcba9876" if "1. 1.9.0+fedcba9876: bad" in out else "1.9.1"
    assert f"first bad build: {named} (" in out
    history = store.history(url, "cpu1-bs64", launcher="local")
    ran = history[history["status"] == "ok"].groupby("run_id").agg(
        reported=("mxnet_reported", "first"), commit=("mxnet_commit", "first"), n=("repeat", "count"))
    assert ran.loc[first.run_id, "reported"] == "1.8.0" and ran.loc[second.run_id, "reported"] == "1.9.0"
    assert ran.loc[second.run_id, "commit"] == "fedcba9876" and set(ran["n"]) == {4}


REGRESSION_RUN = SimpleNamespace(dag_id="mxbench_regression", run_type="scheduled", conf={})


def start_bisects(findings, params, run_id="scheduled__1"):
    from mxbench.airflow_glue import dag_tasks

    return dag_tasks.bisects_to_start.function(findings, {"package": "mxnet==1.9.1"}, params=params, run_id=run_id,
                                               dag_run=REGRESSION_RUN)


FINDING = {"variant": "cpu1-bs64", "launcher": "local", "status": "regression", "triage": "",
           "baseline_builds": "mxnet==1.7.0.post2"}
REGRESSION_PARAMS = {"bisect": True, "repeats": 5, "epochs": 1, "baseline_runs": 5, "confirm_rounds": 4,
                     "only_variants": ["cpu1-bs64", "cpu2w-bs64"], "launchers": ["local"]}


def test_a_regression_dag_run_starts_one_bisect_per_range_unless_triaged(manifest):
    """Its regressions between manifest builds with builds between them: one trigger each, with
    the DAG run's measuring params, a chain minted for it and a run id named by the range with a
    random part (a lasting regression starts it once); an acknowledged one starts none, nor does a
    DAG run with ``bisect`` off."""
    params = REGRESSION_PARAMS
    (started,) = start_bisects([FINDING], params)
    conf = started["conf"]
    assert (conf["good_build"], conf["bad_build"], conf["only_variants"]) == ("2026-10-01", "2026-11-08",
                                                                              ["cpu1-bs64"])
    assert conf["repeats"] == 5 and "baseline_runs" not in conf and "confirm_rounds" not in conf
    assert re.fullmatch(r"bisect__cpu1-bs64__local__2026-10-01__2026-11-08__[0-9a-f]{8}", started["trigger_run_id"])
    assert re.fullmatch(r"[0-9a-f]{32}", conf["bisect_chain"])
    assert start_bisects([FINDING], params) == [started]  # a retry of the task: the same chain and run id
    # its trigger failed, its first DAG run never began: the next night starts the range again
    (again,) = start_bisects([FINDING], params, run_id="scheduled__2")
    assert again["conf"]["bisect_chain"] != conf["bisect_chain"]
    from mxbench.matrix.params import bisect_chain_params

    store.claim(os.environ["MXBENCH_RESULTS_URL"], "mxbench_bisect", again["trigger_run_id"],
                again["conf"]["bisect_chain"], bisect_chain_params(again["conf"]))  # its first DAG run began
    assert start_bisects([FINDING], params, run_id="scheduled__3") == []  # the next night: started already
    acknowledged = {**FINDING, "triage": "acknowledged"}
    assert start_bisects([acknowledged], params) == []
    assert start_bisects([FINDING], {**params, "bisect": False}) == []


def test_the_bisect_a_regression_starts_proves_its_chain_and_a_trigger_user_cannot_pre_empt_it(dag, manifest):
    """A trigger user's own bisect over the range first does not stop the regression DAG's (only
    chains the regression DAG minted count); the DAG run it triggers, with the conf it was handed,
    is the chain's; the same chain id with a conf of one's own is refused before measuring."""
    from airflow.sdk.exceptions import AirflowFailException

    theirs = {"good_build": "2026-10-01", "bad_build": "2026-11-08", "launchers": ["local"], "min_drop": 0.9}
    bisect_tasks.resolve_probe.function(params=form(dag, theirs), run_id="manual__theirs",
                                        dag_run=SimpleNamespace(dag_id=dag.dag_id))
    (started,) = start_bisects([FINDING], REGRESSION_PARAMS)
    record = bisect_tasks.resolve_probe.function(params=form(dag, started["conf"]), run_id=started["trigger_run_id"],
                                                 dag_run=SimpleNamespace(dag_id=dag.dag_id))
    assert record["label"] == "1.7.0.post2"
    with pytest.raises(AirflowFailException, match=r"did not hand this DAG run these params"):
        bisect_tasks.resolve_probe.function(params=form(dag, {**started["conf"], "min_drop": 0.9}),
                                            run_id="manual__forged", dag_run=SimpleNamespace(dag_id=dag.dag_id))


def form(dag, conf):
    """The params a DAG run triggered with ``conf`` gets: the form's defaults, ``conf`` over them, validated."""
    params = copy.deepcopy(dag.params)
    for key, value in conf.items():
        params[key] = value
    return params.validate()


def first_decided(dag, monkeypatch, conf, speed=100.0):
    """The first DAG run of a bisect started with ``conf``, measured (planted rows) and decided."""
    rows = [("manual__0", "cpu1-bs64", "kubernetes", "ok", speed * (1 + i / 100)) for i in range(5)]
    monkeypatch.setattr(store, "history", lambda url, variant=None, launcher=None, dag_ids=None: pd.DataFrame(
        rows, columns=["run_id", "variant", "launcher", "status", "samples_per_sec"]))
    params = form(dag, conf)
    record = bisect_tasks.resolve_probe.function(params=params, run_id="manual__0",
                                                 dag_run=SimpleNamespace(dag_id=dag.dag_id))
    return bisect_tasks.decide.function(record, params=params, run_id="manual__0",
                                        dag_run=SimpleNamespace(dag_id=dag.dag_id))


@pytest.mark.parametrize("change", [
    {"min_drop": 0.9},  # an alert that never fires
    {"probe_build": "1.9.0"},  # the probe of their choice
    {"bisect_runs": [{"build": "1.6.0", "run_id": "manual__forged"}]},  # a reference of their choice
    {"repeats": 3},
    {"max_repeats": 0, "aa_calibration": True},  # keys beyond the form, which the pipeline reads
])
def test_a_probe_that_claims_a_chain_with_params_of_its_own_is_refused_before_it_measures(dag, manifest,
                                                                                          monkeypatch, change):
    """The attack on a chain: trigger mxbench_bisect with the chain's id and the conf it hands on,
    changed. Refused at resolve_probe, naming the chain; the chain's own conf is still accepted."""
    from airflow.sdk.exceptions import AirflowFailException

    decision = first_decided(dag, monkeypatch, {"good_build": "1.6.0", "bad_build": "1.9.1",
                                                "launchers": ["kubernetes"]})
    conf = decision["next_conf"]
    chain_id = conf["bisect_chain"]
    with pytest.raises(AirflowFailException, match=rf"bisect chain {chain_id} did not hand this DAG run these params"):
        bisect_tasks.resolve_probe.function(params=form(dag, {**conf, **change}), run_id="manual__theirs",
                                            dag_run=SimpleNamespace(dag_id=dag.dag_id))
    with pytest.raises(AirflowFailException, match=r"is not one of mxbench_bisect's"):
        bisect_tasks.resolve_probe.function(params=form(dag, {**conf, "bisect_chain": "0" * 32}),
                                            run_id="manual__theirs", dag_run=SimpleNamespace(dag_id=dag.dag_id))
    assert bisect_tasks.resolve_probe.function(params=form(dag, conf), run_id="manual__1",
                                               dag_run=SimpleNamespace(dag_id=dag.dag_id))["label"] == \
        conf["probe_build"]


def test_a_bisect_started_by_hand_carries_none_of_a_chains_state(dag, manifest):
    from airflow.sdk.exceptions import AirflowFailException

    for state in ({"probe_build": "1.9.0"}, {"bisect_runs": [{"build": "1.6.0", "run_id": "manual__x"}]}):
        with pytest.raises(AirflowFailException, match=r"leave all three empty to start a bisect"):
            bisect_tasks.resolve_probe.function(
                params=form(dag, {"good_build": "1.6.0", "bad_build": "1.9.1", **state}), run_id="manual__x",
                dag_run=SimpleNamespace(dag_id=dag.dag_id))


def test_two_dag_runs_with_the_chains_params_move_it_on_once(dag, manifest, monkeypatch):
    """Someone triggers a copy of the chain's next DAG run (same conf): both may measure, the first
    to decide moves the chain on, the second fails loudly and hands nothing on."""
    from airflow.sdk.exceptions import AirflowFailException

    conf = first_decided(dag, monkeypatch, {"good_build": "1.6.0", "bad_build": "1.9.1",
                                            "launchers": ["kubernetes"]})["next_conf"]
    params = form(dag, conf)
    records = [bisect_tasks.resolve_probe.function(params=params, run_id=run_id,
                                                   dag_run=SimpleNamespace(dag_id=dag.dag_id))
               for run_id in ("manual__1", "manual__copy")]
    bisect_tasks.decide.function(records[0], params=params, run_id="manual__1",
                                 dag_run=SimpleNamespace(dag_id=dag.dag_id))
    with pytest.raises(AirflowFailException, match="did not hand this DAG run these params"):
        bisect_tasks.decide.function(records[1], params=params, run_id="manual__copy",
                                     dag_run=SimpleNamespace(dag_id=dag.dag_id))



def test_a_retried_decide_hands_the_same_next_dag_run_on_again(dag, manifest, monkeypatch):
    """The worker died after decide moved the chain on: its retry names the same next DAG run with
    the same conf, rather than being refused and leaving the chain stuck."""
    conf = {"good_build": "1.6.0", "bad_build": "1.9.1", "launchers": ["kubernetes"]}
    first = first_decided(dag, monkeypatch, conf)
    params = form(dag, conf)
    record = bisect_tasks.resolve_probe.function(params=params, run_id="manual__0",
                                                 dag_run=SimpleNamespace(dag_id=dag.dag_id))
    again = bisect_tasks.decide.function(record, params=params, run_id="manual__0",
                                         dag_run=SimpleNamespace(dag_id=dag.dag_id))
    assert (again["next_run_id"], again["next_conf"]) == (first["next_run_id"], first["next_conf"])


def test_a_manual_regression_runs_bisect_does_not_stand_for_the_nightlys(manifest):
    """A trigger user of the regression DAG picks its settings; their bisect of a range does not stop
    the scheduled DAG runs from bisecting it with theirs."""
    from mxbench.matrix.params import bisect_chain_params

    manual = SimpleNamespace(dag_id="mxbench_regression", run_type="manual", conf={"min_drop": 0.9})
    from mxbench.airflow_glue import dag_tasks

    (theirs,) = dag_tasks.bisects_to_start.function([FINDING], {"package": "mxnet==1.9.1"},
                                                    params={**REGRESSION_PARAMS, "min_drop": 0.9},
                                                    run_id="manual__x", dag_run=manual)
    store.claim(os.environ["MXBENCH_RESULTS_URL"], "mxbench_bisect", theirs["trigger_run_id"],
                theirs["conf"]["bisect_chain"], bisect_chain_params(theirs["conf"]))
    (nightly,) = start_bisects([FINDING], REGRESSION_PARAMS)
    assert nightly["conf"]["bisect_chain"] != theirs["conf"]["bisect_chain"]


@pytest.mark.parametrize("run_type", ["backfill", "scheduled"])
def test_a_regression_run_with_a_conf_of_its_own_does_not_stand_for_the_nightlys(manifest, run_type):
    """Whoever may trigger the regression DAG can create a backfill with a conf of their own
    (``airflow backfill create --dag-run-conf``, or reprocessing a scheduled DAG run, which keeps
    its run id): its bisect of a range, begun, does not stop the nightly from bisecting that range
    with its own settings, nor does it take over a chain the nightly's DAG run of that id minted."""
    from mxbench.airflow_glue import dag_tasks
    from mxbench.matrix.params import bisect_chain_params

    url = os.environ["MXBENCH_RESULTS_URL"]
    conf = {"min_drop": 0.9}
    theirs_run = SimpleNamespace(dag_id="mxbench_regression", run_type=run_type, conf=conf)
    (theirs,) = dag_tasks.bisects_to_start.function([FINDING], {"package": "mxnet==1.9.1"},
                                                    params={**REGRESSION_PARAMS, **conf},
                                                    run_id="backfill__x", dag_run=theirs_run)
    store.claim(url, "mxbench_bisect", theirs["trigger_run_id"], theirs["conf"]["bisect_chain"],
                bisect_chain_params(theirs["conf"]))  # their bisect's first DAG run began
    (nightly,) = start_bisects([FINDING], REGRESSION_PARAMS, run_id="scheduled__1")
    assert nightly["conf"]["bisect_chain"] != theirs["conf"]["bisect_chain"]
    store.claim(url, "mxbench_bisect", nightly["trigger_run_id"], nightly["conf"]["bisect_chain"],
                bisect_chain_params(nightly["conf"]))
    # the nightly's DAG run scheduled__1 reprocessed by a backfill with their conf (same run id): not
    # a retry that hands on the nightly's chain, and the range is the nightly's
    assert dag_tasks.bisects_to_start.function([FINDING], {"package": "mxnet==1.9.1"},
                                               params={**REGRESSION_PARAMS, **conf},
                                               run_id="scheduled__1", dag_run=theirs_run) == []
    assert start_bisects([FINDING], REGRESSION_PARAMS, run_id="scheduled__2") == []  # the nightly's stands
    # a backfill without a conf is the nightly's own: its chain stands for the range
    assert dag_tasks.bisects_to_start.function(
        [FINDING], {"package": "mxnet==1.9.1"}, params=REGRESSION_PARAMS, run_id="backfill__y",
        dag_run=SimpleNamespace(dag_id="mxbench_regression", run_type="backfill", conf={})) == []
