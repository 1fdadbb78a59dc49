"""A canary for what no counter shows (stdlib only): a short fixed workload, timed.

A hypervisor taking cycles without reporting steal, a neighbour eating memory bandwidth, a clock
turned down: none of them shows in PSI, steal or another process's CPU, and all of them slow a run.
The canary is the same work every time (an integer and float loop, then a sweep over a buffer larger
than common last-level caches), so on one kind of machine its time moves only when the machine got
slower. Each worker times it right before and right after its training (``HostWatch``); the
orchestration judges the slower of the two against that hardware's A/A runs
(``mxbench.results.contention``).

Each timing is the fastest of ``ROUNDS`` short repeats: a preemption or a page-cache hiccup slows one
repeat, a neighbour that stays slows them all. Measured on the 2-core dev VM (``benchmarks/quiet_vs_busy.py``):
the fastest of 2 quarter-second repeats varied up to 1.29x between the two ends of a quiet 1-worker run,
the fastest of 6 repeats of a quarter of the work (LOOP and passes over the buffer cut to a quarter) up to
1.16x, at the same cost: about 0.45 s a timing on a quiet host (2.2 s at load 7), 2 timings per worker per run.
"""
import time

LOOP = 50_000  # iterations of the arithmetic loop
SWEEP_BYTES = 32 << 20  # the buffer swept: beyond a typical last-level cache, so memory bandwidth counts
STRIDE = 64  # one cache line per touch
PASSES = 16  # passes over the buffer, each touching every cache line once
ROUNDS = 6


def workload() -> int:
    """The fixed work; returns a checksum so that nothing can be skipped."""
    acc, x = 0, 1.0
    for i in range(LOOP):
        acc = (acc * 31 + i) & 0xFFFFFFFF
        x = x * 1.0000001 + 0.5 / (i + 1)
    buffer = bytearray(SWEEP_BYTES)
    view = memoryview(buffer)
    for offset in range(0, STRIDE, STRIDE // PASSES):  # one byte per cache line a pass: every line fetched
        view[offset::STRIDE] = bytes([offset]) * (SWEEP_BYTES // STRIDE)
    return acc ^ int(x) ^ buffer[SWEEP_BYTES - 1]


def time_it(rounds: int = ROUNDS) -> float:
    """Seconds the fixed workload took, the fastest of ``rounds`` (a single preemption is no slowdown)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        workload()
        best = min(best, time.perf_counter() - started)
    return round(best, 4)
