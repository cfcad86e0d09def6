"""Each CPU rank of a replay on cores of its own.

[Note: core binding] On the CPU a replay's ranks are processes that the kernel may move
between cores. A fused pair's two halves hand the compute over at every all-to-all (a
futex wake-up each time), and an emulated link's exchange ends with a sleep; when the
wake-up lands on a core that another rank is using, it waits for that rank's time slice,
and when it lands on another core than the last turn's, the turn starts with that core's
caches (one process timing fused layer pairs alone, ``benchmarks/overlap.py`` (a): on one
core every MoE/MoE pair hid within 0.09 of the planner's share, mostly within 0.04; free to
move, 0.04-0.19 less).
Measured on 2 cores (Qwen3-Next stage of 27 layers at 1/32 width, emulated link, two
processes at once, each timing F, B and the fused pair): unbound, one process's fused
pair hid 23 ms of the 79 ms it hides running alone; bound to one core each, 64 ms and
86 ms. A replay step showed the same thing as plain forwards taking twice their table
time while the other rank ran a fused pair. So when there are cores enough, rank
``local_rank`` is bound to ``threads`` cores of its own, as MPI's ``--bind-to core`` and
torchrun's ``--numa-binding`` do, before any thread of its own (gloo's, the fused pair's
helper) starts, so that they inherit it. With too few cores nothing is bound, and the
report says so. Only the CPU path binds: a GPU rank's compute is on its device.
"""

from __future__ import annotations

import os

__all__ = ["bind_rank"]


def _available() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def bind_rank(local_rank: int, local_world: int, threads: int) -> str:
    """Bind this process to ``threads`` cores of its own when the machine has
    ``local_world x threads`` of them; returns what was done, for the report."""
    cpus = _available()
    if not hasattr(os, "sched_setaffinity"):
        return "not bound: this platform cannot bind processes to cores"
    if local_world * threads > len(cpus):
        return (f"not bound: {local_world} ranks x {threads} thread(s) > {len(cpus)} available cores "
                "(ranks share cores; see planner.replay.binding)")
    mine = cpus[local_rank * threads:(local_rank + 1) * threads]
    os.sched_setaffinity(0, mine)
    return f"bound to cores {','.join(map(str, mine))}"
