"""The two-host variant's samples/s over a shaped link, at two link rates side by side (run in the
orchestration env, as root):

    .venv/airflow/bin/python benchmarks/link_rate.py [--rates 10mbit,1gbit] [--rounds 1] [--keep]

Starts two sshd hosts in network namespaces joined by a tbf-shaped link (standins.sshd with
link_rate, standins.netns) in a scratch folder, which also holds MXBENCH_HOME and a SQLite Airflow
home, and runs cpu2h-bs64 (2 hosts x 1 worker, dist_sync, ResNet-8, 1 epoch of 1000 synthetic
images) under the ssh launcher through dag.test(), once per rate per round, the rates in ABBA
order over the rounds so that a drift of the machine falls on both alike. Between runs only the
links' rate changes (same hosts, same namespaces). Per run: samples/s (runs.csv), the megabytes
each host sent through its switch port, and the run's own reading beside them (runs.csv: the link
rate the run recorded, the bytes a step its busiest host read itself, ``host_watch``); per rate:
the median samples/s; then the slower rate's median over the faster's. Last, the scaling model
over every DAG run (``mxbench scaling DIR ...``), with one run of cpu1-bs64 first for a third
configuration: its network term learned from the rates, not an allowance.

What it says and does not: the hosts are one machine's cores, so the faster rate shows the
compute-bound speed; a rate at which the tiny model's pushes and pulls (about 3 MB each host
sends per run, some 0.2 MB a batch) take longer than its compute shows the link. The link has a
rate but no delay (no netem here). Measured 2026-12-06, 2 rounds on 2 cores shared with other
work (load 7): 10mbit 326 samples/s, 1gbit 409 (0.80), 6.5 minutes; one round takes about 3.
Exits 1 when namespaces cannot be made or a run fails; the scratch folder is removed on success
(unless --keep) and kept otherwise.
"""
import argparse
import os
import statistics
import sys
import time

import pandas as pd
from _stack import TRAIN_PYTHON, airflow, begin, finish, load_dag, stack_env

CONF = {"preset": "cpu-demo", "only_variants": ["cpu2h-bs64"], "launchers": ["ssh"], "repeats": 1,
        "epochs": 1, "synthetic_images": 1000}
ONE_HOST = {**CONF, "only_variants": ["cpu1-bs64"]}  # the scaling model's third configuration


def abba(rates: list, rounds: int) -> list:
    """[(round, rate)]: the rates in order in odd rounds, reversed in even ones."""
    return [(r, rate) for r in range(1, rounds + 1) for rate in (rates if r % 2 else rates[::-1])]


def pooled(folders: list) -> tuple:
    """(runs table, variants by id) of several DAG run folders, as ``mxbench scaling DIR ...`` pools them."""
    from mxbench.report import scaling_tables
    from mxbench.run_folder import DagRunFolder, load_table, read_json

    runs = pd.concat([load_table(DagRunFolder(f).table("runs")) for f in folders], ignore_index=True)
    variants = {}
    for f in folders:
        variants.update(scaling_tables.variants_of(read_json(DagRunFolder(f).request, {})))
    return runs, variants


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="10mbit,1gbit", help="two or more tc rates, e.g. 10mbit,1gbit")
    parser.add_argument("--rounds", type=int, default=1, help="2 or more: the rates in ABBA order")
    args, scratch = begin(parser, "link-rate")
    rates = [r for r in args.rates.split(",") if r]
    started = time.monotonic()
    print(f"scratch folder: {scratch}")
    stack_env(scratch)  # before anything imports airflow: it reads its configuration once
    from standins import netns, sshd

    fleet = sshd.start(scratch / "sshd", link_rate=rates[0])
    rows, ok = [], True
    try:
        if fleet.network["kind"] != "netns":
            print(f"no shaped link here: {fleet.network.get('why')}", file=sys.stderr)
            return finish(False, scratch, args.keep)
        network = netns.Network.from_json(fleet.network)
        airflow("db", "migrate")
        from mxbench import config
        from mxbench.report import scaling_tables

        dag = load_dag()
        os.environ.update(fleet.airflow_env(mxbench_python=str(TRAIN_PYTHON)))
        first = dag.test(run_conf=ONE_HOST)
        folders = [config.dag_run_dir(first.dag_id, first.run_id)]
        ok &= first.state == "success"
        for round_no, rate in abba(rates, args.rounds):
            fleet.set_link_rate(rate)
            os.environ.update(fleet.airflow_env(mxbench_python=str(TRAIN_PYTHON)))
            before = [network.sent(i) for i in range(2)]
            run = dag.test(run_conf=CONF)
            sent_mb = [(network.sent(i) - b) / 1e6 for i, b in enumerate(before)]
            folders.append(config.dag_run_dir(run.dag_id, run.run_id))
            runs = pd.read_csv(folders[-1] / "tables" / "runs.csv")
            good = run.state == "success" and (runs["status"] == "ok").all()
            ok &= bool(good)
            rows.append({"round": round_no, "rate": rate, "samples_per_sec": float(runs["samples_per_sec"].iloc[0])
                         if good else float("nan"), "host1_mb": sent_mb[0], "host2_mb": sent_mb[1]})
            print(f"round {round_no} at {rate:>7}: {rows[-1]['samples_per_sec']:7.1f} samples/s, sent "
                  f"{sent_mb[0]:.1f} MB (host1) and {sent_mb[1]:.1f} MB (host2); DAG run {run.state}")
            if good:
                print(f"    the run's own record: link {runs['link_bits'].iloc[0] / 1e6:g} Mbit/s, busiest host "
                      f"{runs['link_bytes_per_step'].iloc[0] / 1e3:.1f} kB a step")
    finally:
        fleet.stop()
    print("\nrate      samples/s per round          median")
    medians = {}
    for rate in rates:
        values = [r["samples_per_sec"] for r in rows if r["rate"] == rate]
        medians[rate] = statistics.median(values) if values else float("nan")
        print(f"{rate:<9} {', '.join(f'{v:.1f}' for v in values):<28} {medians[rate]:.1f}")
    slow, fast = min(rates, key=netns.rate_bits), max(rates, key=netns.rate_bits)
    print(f"{slow} / {fast}: {medians[slow] / medians[fast]:.2f} of the samples/s")
    if ok:
        print("\nthe scaling model over these DAG runs (mxbench scaling):")
        found = scaling_tables.fitted(*pooled(folders))
        print("\n".join(scaling_tables.holdout_lines(found)) or "no model: fewer than 3 configurations")
        if found:
            print(scaling_tables.terms_table(found).to_string(index=False))
    print(f"wall time: {time.monotonic() - started:.0f} s")
    return finish(ok and bool(rows), scratch, args.keep)


if __name__ == "__main__":
    sys.exit(main())
