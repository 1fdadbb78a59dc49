"""Launch overhead of the ssh launcher against the local launcher (run in the orchestration env):

    .venv/airflow/bin/python benchmarks/ssh_overhead.py [--repeats 3] [--skip-scheduler] [--keep]

Starts two loopback sshd hosts (standins.sshd) in a scratch folder, which also holds
MXBENCH_HOME and a SQLite Airflow home, and runs cpu1-bs64 and cpu2h-bs64 (1 epoch, 1000
synthetic images) under both launchers, first through dag.test(), then through a real Airflow 3
deployment in the same home: `airflow api-server`, `dag-processor` and `scheduler` with the
LocalExecutor (Airflow's default; it accepts SQLite, as `airflow standalone` does), free ports,
one shared JWT secret, the pools of scripts/airflow-init.sh, the DAG triggered with the same conf.
Per mapped run task: overhead = task duration - meta.json trainer_wall_s (first role start to
last role exit), split into Airflow's part (task duration - run_one's duration) and the
launcher's (the rest: for ssh, connect, probe, staging and fetching the logs; ssh.json's step
timings are printed too). An ssh role's own start-up over its channel (session, supervisor) falls
inside trainer_wall_s, so per variant the median task and trainer times are printed as well.
Targets: ssh adds <= 1.0 s median per run; staging to hosts that already have the data set
(ssh.json data_copied_to empty) <= 0.5 s median. Exits 1 when a DAG run fails or nothing was
measured; the scratch folder is removed on success (unless --keep) and kept otherwise.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from _stack import TRAIN_PYTHON, airflow, begin, finish, load_dag, measure, real_scheduler, stack_env, step_timings

SSH_TARGET_S, STAGING_TARGET_S = 1.0, 0.5


def report(title: str, run, tis, dag_dir: Path):
    """Print one mode's lines; (DAG run ok and both launchers measured, summary line, [seconds of
    staging runs that found the data already there])."""
    found = measure(tis, dag_dir)
    print(f"\n== {title}: DAG run {run.run_id}: {run.state}; runs measured: {sum(map(len, found.values()))}")
    medians = {}
    for launcher in sorted(found):
        rows = found[launcher]
        medians[launcher] = med = statistics.median(r["overhead"] for r in rows)
        print(f"{launcher:>5}: overhead per run median {med:.2f} s, max {max(r['overhead'] for r in rows):.2f} s "
              f"over {len(rows)} runs  (of which Airflow median {statistics.median(r['airflow'] for r in rows):.2f} s, "
              f"launcher median {statistics.median(r['launcher'] for r in rows):.2f} s)")
        for r in sorted(rows, key=lambda r: r["key"]):
            print(f"         {r['key']:<24} {r['overhead']:6.2f} s = Airflow {r['airflow']:5.2f} + launcher "
                  f"{r['launcher']:5.2f}")
    if {"local", "ssh"} <= medians.keys():
        diff = medians["ssh"] - medians["local"]
        verdict = "OK" if diff <= SSH_TARGET_S else "OVER"
        print(f"ssh - local: {diff:+.2f} s median per run  (target: ssh adds <= {SSH_TARGET_S} s median per run)  "
              f"{verdict}")
        line = (f"local median {medians['local']:.2f} s, ssh median {medians['ssh']:.2f} s, ssh - local = "
                f"{diff:+.2f} s  (target <= {SSH_TARGET_S} s)  {verdict}")
    else:
        line = f"not measured (launchers measured: {sorted(medians) or 'none'})"
    for variant in sorted({r["variant"] for rows in found.values() for r in rows}):
        cells = []
        for launcher in sorted(found):
            rows = [r for r in found[launcher] if r["variant"] == variant]
            if rows:
                cells.append(f"{launcher} task {statistics.median(r['task'] for r in rows):.2f} s, trainer "
                             f"{statistics.median(r['trainer'] for r in rows):.2f} s")
        print(f"{variant}: medians: {'; '.join(cells)}")
    hits, copies, steps = [], [], step_timings(dag_dir, "ssh", "ssh.json")
    for run_dir in dag_dir.glob("*__ssh__*/"):
        record = json.loads((run_dir / "ssh.json").read_text()) if (run_dir / "ssh.json").exists() else {}
        if "data_s" in record:
            started = json.loads((run_dir / "meta.json").read_text()).get("started_at") or 0
            entry = (started, run_dir.name, record["data_copied_to"], record["data_s"])
            (copies if entry[2] else hits).append(entry)
    for variant, by_step in sorted(steps.items()):  # the ssh launcher's own timings; roles ~ trainer_wall_s
        print(f"{variant}: ssh steps (ssh.json), medians: " + ", ".join(
            f"{name[:-2]} {statistics.median(values):.2f} s" for name, values in by_step.items()))
    for _, key, copied_to, seconds in sorted(copies):
        print(f"data staging, copying: {key} copied it to {', '.join(copied_to)} in {seconds:.2f} s")
    if hits:
        print(f"data staging, host already has it: median {statistics.median(h[3] for h in hits):.3f} s, "
              f"max {max(h[3] for h in hits):.3f} s over {len(hits)} runs")
    ok = run.state == "success" and {"local", "ssh"} <= medians.keys()
    return ok, line, [h[3] for h in hits]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-scheduler", action="store_true", help="dag.test() only")
    args, scratch = begin(parser, "ssh-overhead")
    started = time.monotonic()
    print(f"scratch folder: {scratch}")
    conf = {"preset": "cpu-demo", "only_variants": ["cpu1-bs64", "cpu2h-bs64"], "launchers": ["local", "ssh"],
            "repeats": args.repeats, "epochs": 1, "synthetic_images": 1000}
    port = stack_env(scratch)  # before anything imports airflow: it reads its configuration once
    from standins import sshd

    fleet = sshd.start(scratch / "sshd")
    ok, lines, hits = True, {}, []
    try:
        os.environ.update(fleet.airflow_env(mxbench_python=str(TRAIN_PYTHON)))
        airflow("db", "migrate")
        from mxbench import config

        dag = load_dag()
        run = dag.test(run_conf=conf)
        good, lines["dag.test"], found = report("dag.test", run, run.get_task_instances(),
                                                config.dag_run_dir(run.dag_id, run.run_id))
        ok &= good
        hits += found
        if not args.skip_scheduler:
            logs = scratch / "logs"
            logs.mkdir()
            try:
                run, tis = real_scheduler(conf, port, logs)
            except RuntimeError as exc:
                print(f"\n== real scheduler: {exc}", file=sys.stderr)
                ok, lines["real scheduler"] = False, f"failed: {exc}".splitlines()[0]
            else:
                good, lines["real scheduler"], found = report("real scheduler (LocalExecutor)", run, tis,
                                                              config.dag_run_dir(run.dag_id, run.run_id))
                ok &= good
                hits += found
    finally:
        fleet.stop()
    print()
    for title, line in lines.items():
        print(f"{title + ':':<17}{line}")
    if hits:
        verdict = "OK" if statistics.median(hits) <= STAGING_TARGET_S else "OVER"
        print(f"data to a host that has it: median {statistics.median(hits):.3f} s over {len(hits)} runs "
              f"(target <= {STAGING_TARGET_S} s)  {verdict}")
    else:
        ok = False
        print("data to a host that has it: no ssh run found its data already there")
    print(f"wall time: {time.monotonic() - started:.0f} s")
    return finish(ok, scratch, args.keep)


if __name__ == "__main__":
    sys.exit(main())
