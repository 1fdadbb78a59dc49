"""A canary for what no counter shows (stdlib only): a short fixed workload, timed.

A hypervisor taking cycles without reporting steal, a neighbour eating memory bandwidth, a clock
turned down: none of them shows in PSI, steal or another process's CPU, and all of them slow a run.
The canary is the same work every time (an integer and float loop, then a sweep over a buffer larger
than common last-level caches), so on one kind of machine its time moves only when the machine got
slower. Each worker times it right before and right after its training (``HostWatch``); the
orchestration judges the slower of the two against that hardware's A/A runs
(``mxbench.results.contention``).

``ROUNDS`` is sized for about a quarter of a second on a current x86 core: 2 x that per worker per run.
"""
import time

LOOP = 200_000  # iterations of the arithmetic loop
SWEEP_BYTES = 32 << 20  # the buffer swept: beyond a typical last-level cache, so memory bandwidth counts
STRIDE = 64  # one cache line per touch
ROUNDS = 2


def workload() -> int:
    """The fixed work; returns a checksum so that nothing can be skipped."""
    acc, x = 0, 1.0
    for i in range(LOOP):
        acc = (acc * 31 + i) & 0xFFFFFFFF
        x = x * 1.0000001 + 0.5 / (i + 1)
    buffer = bytearray(SWEEP_BYTES)
    view = memoryview(buffer)
    for offset in range(0, STRIDE):  # write one byte per cache line, STRIDE times over: every line fetched
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
