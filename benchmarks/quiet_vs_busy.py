"""What a run's own cgroup pressure and its canary read on this machine, quiet and beside a planted
2-process busy loop, side by side (issue 39: the defaults a run without A/A calibrations is judged by).

A "run" here is a demo run's roles on one host, each in a cgroup of its own as the starter makes
them (``cgroup.RoleCgroup``): ``--workers`` workers multiplying matrices (BLAS threads: the host's
cores split among them, as ``roles.threads_per_process``) and one parameter server busy a third
of its time. Each worker times the canary right before and right after its span, as ``HostWatch``
does; the span's own pressure is its cgroup's ``cpu.pressure`` over it. Quiet and busy trials
alternate, so the other engineers' load falls on both alike. Prints each trial, then per condition
the own pressure, the own pressure beyond what the run's own processes explain
(``contention.explained_pressure``), the canary's before/after ratio, and what the defaults flag.

Run as root, with the training venv: ``.venv/train/bin/python benchmarks/quiet_vs_busy.py``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tasks"), str(ROOT / "plugins")]

from mxbench.results import contention  # noqa: E402
from mxbench_train import canary, cgroup  # noqa: E402

WORKER = """
import os, sys, time, json
sys.path[:0] = [{tasks!r}]
from mxbench_train import canary
import numpy as np
before = canary.time_it()
start = time.monotonic()
a = np.random.rand(400, 400)
while time.monotonic() - start < {span}:
    a = (a @ a) / 400.0
print(json.dumps({{"canary": [before, canary.time_it()]}}))
"""
SERVER = """
import time
while True:  # busy a third of its time
    t = time.monotonic()
    while time.monotonic() - t < 0.01:
        pass
    time.sleep(0.02)
"""
BUSY = "while True: pass"


def in_cgroup(group: cgroup.RoleCgroup, args, env=None):
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env, preexec_fn=group.enter)


def trial(workers: int, busy: bool, span: float) -> dict:
    cores = os.cpu_count() or 1
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2 if busy else 0)]
    groups = [cgroup.RoleCgroup.make(f"bench-{i}") for i in range(workers + 1)]
    if any(g.folder is None for g in groups):
        raise SystemExit(f"no cgroup of its own: {groups[0].why}")
    threads = str(max(1, cores // workers))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
    server = in_cgroup(groups[-1], [sys.executable, "-c", SERVER])
    time.sleep(0.2)
    started = [cgroup.pressure_total_us(g.folder) for g in groups[:-1]]
    wall = time.monotonic()
    procs = [in_cgroup(g, [sys.executable, "-c", WORKER.format(tasks=str(ROOT / "tasks"), span=span)], env)
             for g in groups[:-1]]
    outputs = [json.loads(p.communicate()[0]) for p in procs]
    wall = time.monotonic() - wall
    pressures = [((cgroup.pressure_total_us(g.folder) or 0) - s) / 1e6 / wall for g, s in zip(groups, started)]
    for p in [server, *hogs]:
        p.kill()
        p.wait()
    for g in groups:
        g.remove()
    times = [t for o in outputs for t in o["canary"]]
    # the run's own compute threads on this host, as the starter sets them: its workers' and the server's
    reading = {"run_pressure": max(pressures), "run_threads": workers * int(threads) + 1, "cpus": cores}
    explained = contention.explained_pressure(reading["run_threads"], cores) or 0.0
    flagged = bool(contention.own_waiting(reading) or contention.canary_slow(times))
    return {"busy": busy, "pressure": round(max(pressures), 3), "excess": round(max(pressures) - explained, 3),
            "ratio": round(max(times) / min(times), 3), "canary_s": round(max(times), 4), "flagged": flagged}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--span", type=float, default=4.0, help="seconds each run trains")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"{args.workers} worker(s) + 1 server on {os.cpu_count()} cores; load before {load[0]:.2f}")
    cost = time.monotonic()
    canary.time_it()
    print(f"canary: {time.monotonic() - cost:.2f} s a timing, 2 a run per worker")
    rows = []
    for i in range(args.pairs):
        for busy in ((False, True) if i % 2 == 0 else (True, False)):
            rows.append(trial(args.workers, busy, args.span))
            print(rows[-1], flush=True)
    for busy in (False, True):
        found = [r for r in rows if r["busy"] == busy]
        flagged = [r for r in found if r["flagged"]]
        print(f"{'busy ' if busy else 'quiet'}: own pressure {min(r['pressure'] for r in found):.2f}-"
              f"{max(r['pressure'] for r in found):.2f}, beyond its own processes "
              f"{min(r['excess'] for r in found):.2f}-{max(r['excess'] for r in found):.2f}, canary ratio "
              f"{min(r['ratio'] for r in found):.2f}-{max(r['ratio'] for r in found):.2f} "
              f"(median canary {statistics.median(r['canary_s'] for r in found):.3f} s); "
              f"flagged by the defaults {len(flagged)}/{len(found)}")
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
