"""Harness overhead of the benchmark DAG (run in the orchestration env):

    .venv/airflow/bin/python benchmarks/harness_overhead.py [--repeats 1]

Runs the cpu-demo matrix through dag.test() in a scratch Airflow home, then, for each mapped
run task, takes the task's duration minus its trainer processes' own wall time (first role
start to last role exit, as the launcher saw them). Prints the median and max per launcher.
Target: median <= 1.0 s.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="mxbench-overhead-"))
    os.environ.update(MXBENCH_HOME=str(home), AIRFLOW_HOME=str(home / "airflow"),
                      AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
                      AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "plugins"), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], check=True,
                   capture_output=True)
    from airflow.dag_processing.dagbag import DagBag

    from mxbench import config

    dag = DagBag(dag_folder=str(REPO / "dags")).dags["mxbench_benchmark"]
    run = dag.test(run_conf={"preset": "cpu-demo", "repeats": args.repeats, "epochs": args.epochs,
                             "synthetic_images": 3000})
    dag_dir = config.dag_run_dir(run.run_id)
    metas = {m.parent.name: json.loads(m.read_text()) for m in dag_dir.glob("*/meta.json")}
    overhead = {}
    for ti in run.get_task_instances():
        meta = metas.get(ti.rendered_map_index)  # the mapped task's label is its run key
        if ti.task_id.endswith(".run_variant") and ti.state == "success" and meta and meta.get("trainer_wall_s"):
            task_s = (ti.end_date - ti.start_date).total_seconds()
            overhead.setdefault(meta["launcher"], []).append(task_s - meta["trainer_wall_s"])
    print(f"DAG run {run.run_id}: {run.state}; runs measured: {sum(map(len, overhead.values()))}")
    for launcher, values in overhead.items():
        print(f"{launcher}: harness overhead per run task: median {statistics.median(values):.2f} s, "
              f"max {max(values):.2f} s over {len(values)} runs  (target: median <= 1.0 s)")


if __name__ == "__main__":
    main()
