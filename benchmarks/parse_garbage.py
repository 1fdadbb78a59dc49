"""Parser robustness on a flood of garbage (run in the orchestration env):

    .venv/airflow/bin/python benchmarks/parse_garbage.py [--mb 100]

Writes two logs of about the same size to a temp folder: one of garbage (long lines of word
characters after a Speed line, a long stretch without any newline, random words with '=',
near-miss 'Epoch[' lines, long runs of P2P-like dots) and one of real-looking Speedometer
lines. Parses each with ``parse_log`` in a fresh process and prints its seconds and peak
memory (max RSS, and its growth over the process's RSS before parsing).
Target: a 100 MB log of garbage parses in seconds, with flat memory.
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


def garbage_lines(rng: random.Random):
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz_-") for _ in range(rng.randint(1, 12)))
             for _ in range(500)]
    while True:  # weights: each kind about the same share of the bytes
        kind = rng.choices(range(7), weights=[1, 0.05, 30, 30, 3, 5, 400])[0]
        if kind == 0:  # the quadratic case of the old metric regex
            yield "Epoch[0] Batch [20]\tSpeed: 1.0 samples/sec\t" + "w" * rng.randint(8_000, 200_000) + "\n"
        elif kind == 1:  # a stretch with no newline at all
            yield "".join(rng.choice(words) for _ in range(200_000))
        elif kind == 2:
            yield " ".join(f"{rng.choice(words)}={rng.choice(words)}" for _ in range(rng.randint(1, 300))) + "\n"
        elif kind == 3:  # near misses
            yield (rng.choice(["Epoch[", "Epoch[12 Batch [", "Epoch[3] Batch [4]\tSpeed: x samples/sec",
                               "Epoch[1] Time cost=", "Node[", ":::MXBENCH {", "only 3 out of"])
                   + "9" * rng.randint(1, 5000) + "\n")
        elif kind == 4:  # P2P-like rows that never end as rows do
            yield ": " + "." * rng.randint(1000, 50_000) + "x\n"
        elif kind == 5:
            yield "[12:00:01] ../src/" + "a" * rng.randint(10, 20_000) + "\n"
        else:
            yield " ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) + "\n"


def real_lines(rng: random.Random):
    epoch = 0
    while True:
        for batch in range(20, 2001, 20):
            yield (f"2026-12-02 12:57:39,129 Node[0] Epoch[{epoch}] Batch [{batch - 20}-{batch}]\t"
                   f"Speed: {rng.uniform(3000, 4000):.2f} samples/sec\taccuracy={rng.random():.6f}\n")
        yield f"2026-12-02 12:57:39,372 Node[0] Epoch[{epoch}] Time cost={rng.uniform(6, 7):.3f}\n"
        yield f"2026-12-02 12:57:39,439 Node[0] Epoch[{epoch}] Validation-accuracy={rng.random():.6f}\n"
        epoch += 1


def write(path: Path, lines, size: int):
    written = 0
    with open(path, "w") as f:
        for line in lines:
            f.write(line)
            written += len(line)
            if written >= size:
                break
    return written


def parse_in_child(path: Path) -> dict:
    """Seconds and memory of one parse, in a fresh process so that peaks do not mix."""
    code = ("import json, resource, sys, time; from mxbench.results.parse import parse_log; "
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; t = time.perf_counter(); "
            "p = parse_log(sys.argv[1]); s = time.perf_counter() - t; "
            "print(json.dumps({'seconds': s, 'maxrss_kb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "
            "'before_kb': before, 'speed_rows': len(p.speed), 'unparsed_count': p.unparsed_count, "
            "'unparsed_kept': len(p.unparsed), 'notices': len(p.notices), 'restarts': len(p.restarts)}))")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                          cwd=REPO)
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    size = int(args.mb * MB)
    results = {}
    with tempfile.TemporaryDirectory(prefix="mxbench-parse-") as tmp:
        for name, lines in (("garbage", garbage_lines(random.Random(args.seed))),
                            ("real", real_lines(random.Random(args.seed)))):
            path = Path(tmp) / f"{name}.log"
            started = time.perf_counter()
            written = write(path, lines, size)
            print(f"{name}: wrote {written / MB:.1f} MB in {time.perf_counter() - started:.1f} s", flush=True)
            r = results[name] = parse_in_child(path)
            print(f"{name}: parsed in {r['seconds']:.2f} s ({written / MB / r['seconds']:.1f} MB/s), "
                  f"max RSS {r['maxrss_kb'] / 1024:.0f} MiB (+{(r['maxrss_kb'] - r['before_kb']) / 1024:.0f} MiB "
                  f"while parsing); {r['speed_rows']} speed rows, {r['unparsed_count']} unparsed "
                  f"({r['unparsed_kept']} kept), {r['notices']} notices, {r['restarts']} restarts", flush=True)
    g, r = results["garbage"], results["real"]
    print(f"garbage/real: time {g['seconds'] / r['seconds']:.2f}x, "
          f"memory growth {(g['maxrss_kb'] - g['before_kb']) / max(r['maxrss_kb'] - r['before_kb'], 1):.3f}x")


if __name__ == "__main__":
    main()
