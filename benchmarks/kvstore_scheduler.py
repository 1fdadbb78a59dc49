"""What starting a dist kvstore's scheduler role costs, through MXNet's Python package and straight
from libmxnet (run in the training env):

    .venv/train/bin/python benchmarks/kvstore_scheduler.py [--times 5]

Every dist run starts one scheduler. ``import mxnet`` with ``DMLC_ROLE=scheduler`` runs it, after
building every operator's Python function; ``python -m mxbench_train serve`` makes the same C calls
without the package (``mxbench_train.kvstore_scheduler``). Each way in turn, ``--times`` times: a
scheduler for a job of one worker and one server is started, its CPU seconds (user + system, from
/proc) are read once it listens on its port, and it is killed (no node ever joins: up to there, both
load the same library and start ps-lite; only the first imports MXNet's Python package). Prints the
fastest of each and their ratio.
Target: the scheduler without the package starts on well under half the CPU.
"""
import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tasks"))

from mxbench_train.localhost import free_port, proc_stat  # noqa: E402

WAYS = {"import mxnet": ["-c", "import mxnet"], "mxbench_train serve": ["-m", "mxbench_train", "serve"]}
TICK = os.sysconf("SC_CLK_TCK")


def started_cpu_s(args) -> float:
    """CPU seconds a scheduler started with ``args`` used until it listened on its port."""
    port = free_port()
    env = {**os.environ, "DMLC_ROLE": "scheduler", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(port),
           "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "1", "DMLC_NODE_HOST": "127.0.0.1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{args}: the scheduler exited {proc.returncode}: {proc.stderr.read()[-500:]!r}")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"{args}: no scheduler listening on {port} within 120 s")
            time.sleep(0.02)
        return proc_stat(proc.pid).cpu_ticks / TICK
    finally:
        proc.kill()
        proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--times", type=int, default=5)
    args = parser.parse_args()
    seen = {way: [] for way in WAYS}
    for _ in range(args.times):  # alternating: a slow spell of the machine lands on both
        for way, way_args in WAYS.items():
            seen[way].append(started_cpu_s(way_args))
    print(f"a kvstore scheduler, started until it listens (fastest of {args.times}, CPU s):")
    for way, seconds in seen.items():
        print(f"  {way:22s} {min(seconds):.3f}  (all: {', '.join(f'{s:.2f}' for s in seconds)})")
    ours, theirs = min(seen["mxbench_train serve"]), min(seen["import mxnet"])
    print(f"  ratio serve/import     {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
