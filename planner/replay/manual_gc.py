"""Python's garbage collector kept out of the timed steps, as training loops do.

[Note: manual gc] The cyclic collector runs whenever enough container objects have been
allocated, in whichever thread allocates, and a full collection walks every tracked
object of the process. In a replay rank (plans, cost tables, layer programs, autograd
bookkeeping) one collection stalled an action by 150-250 ms: measured on 2 CPU cores
(Qwen3-Next at 1/32 width, pp 2, 4 microbatches, emulated link), one forward per step ran
at twice its table time and fused pairs at 1.4-1.7x, a different action each step;
with the collector held off during the steps those actions ran at 0.95-1.14x, and the
fused plan's step fell from 2.42-2.52 s to 2.15 s. Training loops hold it off for the
same reason: Megatron-LM's ``--manual-gc`` (``gc.disable()``, a ``gc.collect()`` every
``--manual-gc-interval`` steps, megatron/training/training.py) and torchtitan's
``GarbageCollection`` (``gc.disable()``, ``gc.collect(1)`` every ``gc_freq`` steps,
torchtitan/tools/utils.py). Here: everything built before the steps is collected once and
frozen (``gc.freeze``: later collections skip it), the collector is off inside each
timed step and a collection runs between steps, untimed, so no cycle outlives a step.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["freeze_setup", "collector_off"]


def freeze_setup() -> None:
    """Collect once and move every object that survives out of later collections."""
    gc.collect()
    gc.freeze()


@contextmanager
def collector_off() -> Iterator[None]:
    """No automatic collection inside the block; one collection after it (untimed)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.collect()
