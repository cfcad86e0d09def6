"""The profiler's own cost on a host clock, measured in the traced process and taken out.

On a CPU (gloo) run the trace's times are the host's, and the profiler lengthens them: each
operator it records runs its start and end callbacks and writes an event inside the range
being measured (about 3.5 us per event on this project's CPU machine with torch 2.13,
docs/trace-import.md; a decoder layer's forward at small width records hundreds). Tracing
tools compensate the same way (Score-P's and TAU's overhead compensation: Malony and Shende,
"Overhead Compensation in Performance Profiling", Euro-Par 2004): the recorder runs a fixed
block of work (``calibration_block``) once without the profiler and several times under it,
each in a ``ppplan/calibrate`` range (``profiler.trace.names.CALIBRATION_RANGE``), so the
trace carries what one recorded event costs in that process (``per_event_seconds``), and the
importer subtracts that cost times the number of events recorded inside each range. A GPU
trace's device clock is not lengthened (kernel durations) and is not corrected.
"""

from __future__ import annotations

import time
from typing import Any, Callable

__all__ = ["CALIBRATION_REPEATS", "calibration_block", "unprofiled_seconds", "per_event_seconds"]

CALIBRATION_REPEATS = 5
"""Runs of the block on each side; the best (least disturbed) run counts."""
_PASSES = 10
"""Forward and backward passes per run of the block: about 1,500 recorded events, so one
event's cost stands well above the run-to-run noise of the difference."""


def calibration_block() -> Callable[[], None]:
    """A fixed forward and backward of a small MLP: the operators (GEMMs, views, element-wise,
    autograd nodes) a layer's range records, at a size where the profiler's share is large."""
    import torch

    gen = torch.Generator().manual_seed(0)
    layers = [torch.randn(64, 64, generator=gen, requires_grad=True) for _ in range(8)]
    x = torch.randn(32, 64, generator=gen)

    def run() -> None:
        for _ in range(_PASSES):
            h = x
            for w in layers:
                h = torch.nn.functional.silu(h @ w)
            h.sum().backward()
            for w in layers:
                w.grad = None
    return run


def unprofiled_seconds(block: Callable[[], None], repeats: int = CALIBRATION_REPEATS) -> float:
    """Best wall time of ``block`` without a profiler (one warm-up run first)."""
    block()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        block()
        best = min(best, time.perf_counter() - t0)
    return best


def per_event_seconds(ranges: list[tuple[float, int]], run: dict[str, Any]) -> float | None:
    """Seconds one recorded event adds on this rank: ``ranges`` holds (duration in us, events
    recorded inside) of each ``ppplan/calibrate`` range, ``run`` the trace's run metadata with
    ``calibration.unprofiled_s``. None when the trace has no calibration (not recorded by
    ``profiler.trace.record.recording``)."""
    cal = run.get("calibration") if isinstance(run, dict) else None
    if not ranges or not isinstance(cal, dict) or not isinstance(cal.get("unprofiled_s"), (int, float)):
        return None
    dur_us, events = min(ranges)
    if events <= 0:
        return None
    return max(0.0, (dur_us * 1e-6 - float(cal["unprofiled_s"])) / events)
