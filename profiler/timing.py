"""Clocks and repeat statistics shared by the CPU and the CUDA paths.

A ``Clock`` hands out marks: ``time.perf_counter()`` values on the CPU, recorded CUDA
events on a GPU (so a mark does not synchronise the device). ``elapsed(a, b)`` is read
after ``sync()``. Everything else in the profiler is the same on both devices.

[Note: manual gc] Python's cyclic collector runs whenever enough container objects have
been allocated, in whichever thread allocates, and a full collection walks every tracked
object of the process; in a replay rank (plans, cost tables, layer programs, autograd
bookkeeping) one collection stalls whichever action is running (figures: docs/overlap.md,
"Python's garbage collector"). Training loops hold it off for the same reason:
Megatron-LM's ``--manual-gc`` (``gc.disable()``, a ``gc.collect()`` every
``--manual-gc-interval`` steps, megatron/training/training.py) and torchtitan's
``GarbageCollection`` (``gc.disable()``, ``gc.collect(1)`` every ``gc_freq`` steps,
torchtitan/tools/utils.py). So: everything built before the timings is collected
once and frozen (``freeze_setup``: later collections skip it), the collector is off
inside a timing and a collection runs after it, untimed (``collector_off``).
"""

from __future__ import annotations

import gc
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch

__all__ = ["Clock", "Stat", "summarize", "pooled", "collector_off", "freeze_setup"]


class Clock:
    """Marks and elapsed seconds on ``device`` (cpu or cuda)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        """A point in time on the current stream."""
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def sync(self) -> None:
        """Wait for queued device work (no-op on the CPU)."""
        if self.cuda:
            torch.cuda.synchronize()

    def elapsed(self, a: Any, b: Any) -> float:
        """Seconds from mark a to mark b (call ``sync`` first on a GPU)."""
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def seconds(self, a: Any, b: Any) -> float:
        """Seconds from mark a to mark b, waiting for mark b's event first on a GPU."""
        if self.cuda:
            b.synchronize()
        return self.elapsed(a, b)


@dataclass(frozen=True, kw_only=True)
class Stat:
    """Median and spread of repeated timings."""

    median: float
    """Median seconds."""
    cv: float
    """Coefficient of variation: sample standard deviation / mean (0 for one sample)."""
    samples: int
    """Number of repeats."""
    values: tuple[float, ...] = ()
    """The timings themselves (what ``pooled`` joins across processes)."""


def summarize(values: list[float]) -> Stat:
    """Median and coefficient of variation of repeated timings."""
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 and mean > 0 else 0.0
    return Stat(median=statistics.median(values), cv=cv, samples=len(values), values=tuple(values))


def pooled(stats: list[Stat]) -> Stat:
    """One ``Stat`` of every sample of ``stats``: the median over all of them, the statistic
    the trace importer takes over every sample of every rank (``profiler.trace``)."""
    return summarize([v for s in stats for v in s.values])


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
