"""The two-host variant's samples/s over two links of the same hosts, in one DAG run, and the
scaling model's network term identified from them (run in the orchestration env, as root):

    .venv/airflow/bin/python benchmarks/link_rate.py [--rates 4mbit,1gbit] [--rounds 2] [--keep]

Starts two sshd hosts in network namespaces (standins.sshd, standins.netns) in a scratch folder,
which also holds MXBENCH_HOME and a SQLite Airflow home: their default link shaped to the faster
rate, their second link ``slow`` (each connection's ``mxbench_links``) to the slower one. Then one
DAG run of the ``cpu-link`` preset through dag.test() under the ssh launcher: cpu1-bs64 (the
model's third size), cpu2h-bs64 (2 hosts x 1 worker, dist_sync, ResNet-8) over the default link
and its twin cpu2h-bs64-slow over the slow one, 1 epoch of 1000 synthetic images, ``--rounds``
rounds; what the user gets from ``mxbench scaling RUN_DIR`` on that one run. Per run: samples/s,
the rate it recorded and the bytes a step its busiest host read (runs.csv); per variant the median;
then the slow link's median over the fast one's, and the scaling model (its network term's line:
identified, with the share of the link's time that shows in the step and its interval, or not and
why).

What it says and does not: the hosts are one machine's cores, so the faster rate shows the
compute-bound speed; a rate at which the tiny model's pushes and pulls (some 0.36 MB a step
through the busiest host) take longer than its compute shows the link. The link has a rate but no
delay (no netem here). Exits 1 when namespaces cannot be made or a run fails; the scratch folder
is removed on success (unless --keep) and kept otherwise.
"""
import argparse
import os
import sys
import time

import pandas as pd
from _stack import TRAIN_PYTHON, airflow, begin, finish, load_dag, stack_env

CONF = {"preset": "cpu-link", "launchers": ["ssh"], "epochs": 1, "synthetic_images": 1000}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="4mbit,1gbit", help="the slow link's rate, then the default link's")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the preset (2 or more: one run a rate "
                                                              "leaves no spread to identify the term by)")
    args, scratch = begin(parser, "link-rate")
    rates = args.rates.split(",")
    if len(rates) != 2:
        parser.error("--rates is two rates: the slow link's, then the default link's (like 4mbit,1gbit)")
    slow, fast = rates
    started = time.monotonic()
    print(f"scratch folder: {scratch}")
    stack_env(scratch)  # before anything imports airflow: it reads its configuration once
    from standins import sshd

    fleet = sshd.start(scratch / "sshd", link_rate=fast, links={"slow": slow})
    try:
        if fleet.network["kind"] != "netns":
            print(f"no shaped link here: {fleet.network.get('why')}", file=sys.stderr)
            return finish(False, scratch, args.keep)
        airflow("db", "migrate")
        from mxbench import config
        from mxbench.report import scaling_tables
        from mxbench.run_folder import read_json

        os.environ.update(fleet.airflow_env(mxbench_python=str(TRAIN_PYTHON)))
        run = load_dag().test(run_conf={**CONF, "repeats": args.rounds})
        folder = config.dag_run_dir(run.dag_id, run.run_id)
    finally:
        fleet.stop()
    runs = pd.read_csv(folder / "tables" / "runs.csv")
    ok = run.state == "success" and bool((runs["status"] == "ok").all())
    for r in runs.sort_values(["repeat", "started_at"]).itertuples():
        link = f"link {r.link_bits / 1e6:g} Mbit/s, busiest host {r.link_bytes_per_step / 1e3:.1f} kB a step" \
            if r.link_bits == r.link_bits else "one host"
        print(f"round {r.repeat} {r.variant:<16} {r.samples_per_sec:7.1f} samples/s ({link})")
    medians = runs.groupby("variant")["samples_per_sec"].median()
    print(f"\nmedian samples/s: {', '.join(f'{v} {s:.1f}' for v, s in medians.items())}")
    print(f"{slow} / {fast}: {medians['cpu2h-bs64-slow'] / medians['cpu2h-bs64']:.2f} of the samples/s")
    if ok:
        print("\nthe scaling model of this one DAG run (mxbench scaling RUN_DIR):")
        found = scaling_tables.models(runs, read_json(folder / "request.json"))
        print("\n".join(scaling_tables.holdout_lines(found)) or "no model: fewer than 3 configurations")
        if found:
            print(scaling_tables.terms_table(found).to_string(index=False))
    print(f"wall time: {time.monotonic() - started:.0f} s")
    return finish(ok, scratch, args.keep)


if __name__ == "__main__":
    sys.exit(main())
