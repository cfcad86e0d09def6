"""A fixed pure-Python workload that states how fast this machine runs the planner's kind of code.

CPU-time figures move with the machine: the first-plan table of docs/search-peers.md was
measured on one 2-core machine and re-run on another, where both ppplan and the peer took
about 3x the CPU time (their ratio stayed put). A page that records this reference beside its
timings lets a claim compare "CPU time in units of the reference" instead of CPU seconds, as
SPEC normalises by a reference machine (https://www.spec.org/cpu2017/Docs/overview.html).

The workload mixes what the schedulers do (heap pushes and pops, dict and list traffic, float
arithmetic, a sort); it imports nothing of ppplan, so a change to the planner never moves it.
"""

from __future__ import annotations

import heapq
import time

__all__ = ["reference_cpu_s", "REFERENCE_NAME"]

REFERENCE_NAME = "benchmarks/machine.py reference (best of 7, CPU s)"


def _workload(n: int = 10_000) -> float:
    """One pass: an event-queue simulation over ``n`` tasks with per-key bookkeeping."""
    heap: list[tuple[float, int]] = []
    finish: dict[int, float] = {}
    lanes = [0.0] * 16
    x = 0.5
    for i in range(n):
        x = (x * 3.7 + 0.1) % 1.0
        heapq.heappush(heap, (x, i))
    while heap:
        t, i = heapq.heappop(heap)
        lane = i % 16
        start = max(lanes[lane], finish.get(i - 16, 0.0))
        lanes[lane] = start + t
        finish[i] = lanes[lane]
    order = sorted(finish.items(), key=lambda kv: (kv[1], kv[0]))
    return sum(v for _, v in order[: n // 4]) + max(lanes)


def reference_cpu_s(repeats: int = 7) -> float:
    """The best CPU time of ``repeats`` passes (the best, as the table's rows are best of 3)."""
    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        _workload()
        best = min(best, time.process_time() - c0)
    return best
