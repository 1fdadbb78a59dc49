"""What serializing the mxbench DAGs costs under each JSON Schema dialect of their trigger forms (run in
the orchestration env):

    .venv/airflow/bin/python benchmarks/dag_serialization.py [--times 5]

Airflow serializes a DAG on every parse of its file (the dag-processor, ``airflow dags reserialize``)
and at the start of ``dag.test()``; serializing resolves each Param of the form once or more per
task, and each resolve checks the Param's schema against its dialect's metaschema. Loads the three
DAG files once, then serializes all three ``--times`` times with the forms as they are (draft-07,
``mxbench.airflow_glue.dag_params.SCHEMA_DIALECT``) and with the same forms in jsonschema's default
dialect (2020-12), side by side, and prints the CPU seconds of each (the fastest of the times) and
their ratio. Both must serialize to the same DAGs but for the dialect's name.
Target: the forms' dialect costs well under half of the default's.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "plugins"), str(REPO / "tasks")]


def forms(dag):
    """Every ParamsDict the DAG serializes: the DAG's and each task's."""
    yield dag.params
    for task in dag.task_dict.values():
        params = getattr(task, "params", None)
        if params is not None and params is not dag.params:
            yield params


def set_dialect(dags, dialect):
    """Each Param's schema in ``dialect`` (None: no ``$schema``, jsonschema's default)."""
    for dag in dags:
        for params in forms(dag):
            for name in params:
                schema = params.get_param(name).schema
                schema.pop("$schema", None)
                if dialect:
                    schema["$schema"] = dialect


def without_dialect(value):
    if isinstance(value, dict):
        return {k: without_dialect(v) for k, v in value.items() if k != "$schema"}
    if isinstance(value, (list, tuple)):
        return type(value)(without_dialect(v) for v in value)
    return value


def cpu_seconds(serialize, dags, times):
    """The fastest of ``times`` serializations of all ``dags``, in CPU seconds, and the last output."""
    best, out = float("inf"), None
    for _ in range(times):
        started = time.process_time()
        out = [serialize(dag) for dag in dags]
        best = min(best, time.process_time() - started)
    return best, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--times", type=int, default=5)
    args = parser.parse_args()
    from standins.airflow_stack import checkout_env  # before Airflow reads its configuration

    home = Path(tempfile.mkdtemp(prefix="mxbench-bench-serialize-"))
    os.environ.update(checkout_env(home, home / "airflow"))
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    from mxbench.airflow_glue.dag_params import SCHEMA_DIALECT

    try:
        bag = DagBag(dag_folder=str(REPO / "dags"))
        assert not bag.import_errors, bag.import_errors
        dags = [bag.dags[dag_id] for dag_id in sorted(bag.dags)]
        figures = {}
        for label, dialect in (("forms' dialect (draft-07)", SCHEMA_DIALECT), ("jsonschema's default (2020-12)", None)):
            set_dialect(dags, dialect)
            figures[label] = cpu_seconds(DagSerialization.to_dict, dags, args.times)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    (ours, ours_out), (default, default_out) = figures.values()
    assert "$schema" not in repr(default_out), "a Param kept its dialect"
    assert without_dialect(ours_out) == without_dialect(default_out), "the dialects serialize different DAGs"
    print(f"serializing {', '.join(d.dag_id for d in dags)} (fastest of {args.times}, CPU s):")
    for label, (seconds, _) in figures.items():
        print(f"  {label:32s} {seconds:.3f}")
    print(f"  ratio forms/default            {ours / default:.2f}")


if __name__ == "__main__":
    main()
