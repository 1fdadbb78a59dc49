"""DAG tiers 1 and 2: it imports cleanly, fast and without side effects; its edges are as designed."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAG_FILES = sorted((REPO / "dags").glob("*.py"))


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == {p.stem for p in DAG_FILES}  # the dag id is the file's stem


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=lambda p: p.name)
def test_dag_file_imports_fast_without_io(dag_file, tmp_path):
    """Parsed every few seconds by the DAG processor: no subprocess, no files, no heavy imports."""
    probe = f"""
import subprocess, sys, time, importlib.util
import importlib
import airflow.sdk  # the cost of Airflow itself is not the DAG file's
airflow.sdk.DAG("warm_up", schedule=None)  # Airflow's own lazy imports (croniter runs `file` once)
# nor are the airflow.* modules the file names: the dag-processor imports them once, before it
# forks a process per parse (parsing_pre_import_modules), just like this
from airflow.utils.file import iter_airflow_imports
for module in iter_airflow_imports({str(dag_file)!r}):
    importlib.import_module(module)
def refuse(*a, **k): raise AssertionError("subprocess at import")
subprocess.Popen = refuse
start = time.perf_counter()
spec = importlib.util.spec_from_file_location("dagfile", {str(dag_file)!r})
spec.loader.exec_module(importlib.util.module_from_spec(spec))
elapsed = time.perf_counter() - start
heavy = [m for m in ("pandas", "matplotlib", "mxnet", "numpy") if m in sys.modules]
print(elapsed, ",".join(heavy) or "-")
"""
    env = {**os.environ, "MXBENCH_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    elapsed, heavy = done.stdout.split()[-2:]
    assert float(elapsed) < 0.5
    assert heavy == "-"
    assert not (tmp_path / "home").exists()


@pytest.mark.alone  # a wall-clock bound: other tests beside it would be its cost
def test_the_ui_plugin_costs_little_where_it_is_not_served(tmp_path):
    """Every Airflow process that loads plugins imports it, each task's too: no api-server modules,
    no pandas, no I/O there."""
    probe = f"""
import sys, time
sys.path.insert(0, {str(REPO / "plugins")!r})
import airflow.plugins_manager  # Airflow's own cost
start = time.perf_counter()
import mxbench_ui  # the plugins folder's file, which defers to the installed package's entry point
import mxbench.airflow_glue.ui_plugin  # what that entry point loads
elapsed = time.perf_counter() - start
heavy = [m for m in ("pandas", "matplotlib", "numpy", "airflow.api_fastapi.core_api.security", "airflow.models.dagrun")
         if m in sys.modules]
print(elapsed, ",".join(heavy) or "-")
"""
    env = {**os.environ, "MXBENCH_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    elapsed, heavy = done.stdout.split()[-2:]
    assert float(elapsed) < 0.5 and heavy == "-"
    assert not (tmp_path / "home").exists()


def test_structure(dagbag):
    dag = dagbag.dags["mxbench_benchmark"]
    edges = {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}
    assert edges == {
        ("expand_variants", "prepare_data"), ("expand_variants", "local.pick"),
        ("local.pick", "local.run_variant"), ("prepare_data", "local.run_variant"),
        ("local.run_variant", "parse_logs"), ("parse_logs", "join_results"),
        ("join_results", "report"), ("report", "check_runs"),
        ("join_results", "store_results"), ("store_results", "check_runs"),
    }
    tasks = {t.task_id: t for t in dag.tasks}
    assert tasks["parse_logs"].trigger_rule == "all_done" and tasks["check_runs"].trigger_rule == "all_done"
    assert tasks["local.run_variant"].pool == "mxbench_local"
    assert dag.max_active_runs == 1  # two DAG runs measuring at once would spoil each other's numbers
    assert dag.tags and {"mxbench", "benchmark"} <= set(dag.tags)
    # retries are the deployment's ([core] default_task_retries: 0 unless set), never the DAG's own
    from airflow.configuration import conf
    assert all(t.retries == conf.getint("core", "default_task_retries") for t in dag.tasks)
    assert dag.doc_md and "mxbench_benchmark" in dag.doc_md


def test_regression_dag_structure(dagbag):
    dag = dagbag.dags["mxbench_regression"]
    edges = {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}
    assert {("resolve_build", "expand_variants"), ("resolve_build", "store_results"),
            ("join_results", "store_results"), ("store_results", "check_regression"),
            ("check_regression", "report"), ("report", "check_runs")} <= edges
    assert dag.schedule == "@daily" and dag.catchup is False and dag.max_active_runs == 1
    assert dag.params["baseline_runs"] == 5 and dag.params["min_drop"] == 0.05
    tasks = {t.task_id: t for t in dag.tasks}
    assert tasks["local.run_variant"].pool == "mxbench_local" and tasks["check_runs"].trigger_rule == "all_done"


def test_a_run_task_is_one_operator_per_run(dagbag):
    """One mapped task per run, never one per role pod: the pool comes from partial() only, and a
    run's roles must all run at once; not deferrable, so it keeps its pool slot. A Kubernetes run's
    pods are built by a KubernetesPodOperator made for that run, with the connection's settings."""
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    from mxbench.airflow_glue.operators import RunVariantOperator
    from mxbench.launchers.kubernetes.pods import PodSettings

    run_variant = dagbag.dags["mxbench_benchmark"].get_task("local.run_variant")
    assert run_variant.operator_class is RunVariantOperator
    assert set(run_variant.expand_input.value) == {"run"}
    assert run_variant.partial_kwargs.get("deferrable", False) is False  # nor made so in the DAG
    task = RunVariantOperator(task_id="probe", run={})
    assert task.start_from_trigger is False and not hasattr(task, "execute_complete")  # nothing to resume
    assert task._killed is False
    settings = PodSettings(conn_id="cluster_a", namespace="bench", image="registry.example.com/mxbench-train:1",
                           data={"host_path": "/srv/mxbench"}, pod_template_file="/etc/mxbench/pod.yaml")
    pods = task.pod_operator(settings)
    assert isinstance(pods, KubernetesPodOperator) and pods.deferrable is False and pods.task_id == "probe"
    assert (pods.kubernetes_conn_id, pods.namespace, pods.image, pods.pod_template_file) == (
        "cluster_a", "bench", "registry.example.com/mxbench-train:1", "/etc/mxbench/pod.yaml")
    # mxbench's pod settings (pod_template) go over the template file
    assert pods.full_pod_spec.spec.automount_service_account_token is False
    volumes = pods.full_pod_spec.spec.volumes
    assert {v.name: v.host_path.path for v in volumes if v.host_path} == {"data": "/srv/mxbench"}


def test_a_run_tasks_airflow_timeout_follows_the_run_deadline():
    from datetime import timedelta

    from mxbench.airflow_glue.operators import RunVariantOperator

    task = RunVariantOperator(task_id="probe", run={})
    task.pre_execute({"params": {"run_timeout_minutes": 30}})
    assert task.execution_timeout == timedelta(minutes=35)  # the launcher's deadline, then Airflow's


def test_trigger_form_params_validate(dagbag):
    from airflow.sdk.definitions.param import ParamsDict

    dag = dagbag.dags["mxbench_benchmark"]
    from mxbench.stats.floors import repeats_needed, rounds_needed

    # the repeats a verdict needs come from the exact tests' floors, never typed by hand
    assert dag.params["preset"] == "cpu-demo" and dag.params["repeats"] == rounds_needed() == 6
    assert dag.params["target_gap"] == 0.05 and dag.params["max_repeats"] is None
    regression = dagbag.dags["mxbench_regression"]
    assert regression.params["repeats"] == repeats_needed() == 4 and "max_repeats" not in regression.params
    # contended rounds' own replacement budget: where the form has max_repeats, and only there
    assert dag.params["contended_replacements"] is None and "contended_replacements" not in regression.params
    for bad in ({"repeats": 0}, {"preset": "all"}, {"dataset": "x; rm -rf /"}, {"num_layers": 9},
                {"target_gap": 0}, {"target_gap": 0.9}, {"max_repeats": 0}, {"contended_replacements": -1},
                {"contended_replacements": 26}, {"contended_replacements": "3; rm -rf /"}):
        params = ParamsDict({k: dag.params.get_param(k) for k in dag.params})
        with pytest.raises(Exception, match="Invalid input|is not|less than|does not match"):
            params.update(bad)
            params.validate()


# where a draft-07 schema holds subschemas: a map of them, one, or one or a list of them
SUBSCHEMA_MAPS = ("properties", "patternProperties", "definitions", "dependencies")
SUBSCHEMAS = ("items", "additionalItems", "additionalProperties", "contains", "propertyNames", "not", "if", "then",
              "else", "anyOf", "allOf", "oneOf")
# what Airflow's trigger form reads beside JSON Schema's keywords
FORM_ANNOTATIONS = {"section", "values_display", "description_md", "custom_html_form"}


def draft_07_keywords_missing(schema) -> set:
    """The keywords of ``schema`` and its subschemas that draft-07 does not know, beyond the
    annotations of Airflow's trigger form."""
    import jsonschema

    if not isinstance(schema, dict):  # true or false, as a subschema
        return set()
    missing = set(schema) - set(jsonschema.Draft7Validator.META_SCHEMA["properties"]) - FORM_ANNOTATIONS
    subs = [sub for key in SUBSCHEMA_MAPS if isinstance(schema.get(key), dict) for sub in schema[key].values()]
    for key in SUBSCHEMAS:
        value = schema.get(key)
        subs += value if isinstance(value, list) else [value] if value is not None else []
    for sub in subs:
        missing |= draft_07_keywords_missing(sub)
    return missing


def test_every_form_is_a_draft_07_schema_as_it_declares(dagbag):
    """The forms declare draft-07 (``dag_params.SCHEMA_DIALECT``: Airflow checks a Param's schema
    each time it resolves it, and serializing the DAGs takes 0.39 of 2020-12's time): each Param's
    schema is one, and uses no keyword that draft-07 would ignore."""
    import jsonschema

    from mxbench.airflow_glue.dag_params import SCHEMA_DIALECT

    for dag_id, dag in dagbag.dags.items():
        for name in dag.params:
            schema = dag.params.get_param(name).schema
            assert schema.get("$schema") == SCHEMA_DIALECT, (dag_id, name, schema)
            assert jsonschema.validators.validator_for(schema) is jsonschema.Draft7Validator
            jsonschema.Draft7Validator.check_schema(schema)
            assert not draft_07_keywords_missing(schema), (dag_id, name, schema)
    # the check itself finds keywords draft-07 lacks wherever a subschema may stand
    assert draft_07_keywords_missing({"type": "array", "items": {"type": "array", "prefixItems": []}}) \
        == {"prefixItems"}
    assert draft_07_keywords_missing({"anyOf": [True, {"$defs": {}}], "items": [{"unevaluatedItems": False}],
                                      "properties": {"a": {"not": {"dependentRequired": {}}}},
                                      "section": "Run", "values_display": {}}) \
        == {"$defs", "unevaluatedItems", "dependentRequired"}


def test_the_forms_default_quiet_wait_is_the_deployment_setting(monkeypatch):
    """Airflow's [mxbench] quiet_wait_s gives the form's default (what a scheduled DAG run waits);
    one outside the form's bounds fails the parse, naming the setting."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("AIRFLOW__MXBENCH__QUIET_WAIT_S", "7")
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    for dag_id in ("mxbench_benchmark", "mxbench_regression", "mxbench_bisect"):
        assert bag.dags[dag_id].params["quiet_wait_s"] == 7, dag_id
        assert bag.dags[dag_id].params.get_param("quiet_wait_s").schema["maximum"] == 1800, dag_id
    for bad in ("1801", "-1", "2.5", "sixty"):
        monkeypatch.setenv("AIRFLOW__MXBENCH__QUIET_WAIT_S", bad)
        bag = DagBag(dag_folder=str(REPO / "dags"))
        assert bag.dags == {} and len(bag.import_errors) == 3, bad
        assert all("AIRFLOW__MXBENCH__QUIET_WAIT_S" in error for error in bag.import_errors.values()), bad


def test_the_quiet_wait_is_a_bounded_param_of_every_form(dagbag):
    from airflow.sdk.definitions.param import ParamsDict

    for dag_id in ("mxbench_benchmark", "mxbench_regression", "mxbench_bisect"):
        dag = dagbag.dags[dag_id]
        assert dag.params["quiet_wait_s"] == 60, dag_id
        for good in (0, 1800):
            params = ParamsDict({k: dag.params.get_param(k) for k in dag.params})
            params.update({"quiet_wait_s": good})
            if dag_id == "mxbench_bisect":
                params.update({"good_build": "1.9.0", "bad_build": "1.9.1"})
            params.validate()
        for bad in (-1, 1801, 2.5, "60"):
            params = ParamsDict({k: dag.params.get_param(k) for k in dag.params})
            with pytest.raises(Exception, match="Invalid input|is not|less than|greater than"):
                params.update({"quiet_wait_s": bad})
                params.validate()
