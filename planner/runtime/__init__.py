"""Run a pipeline schedule's fused ``OVERLAP_F_B`` actions with real overlap.

``attach(schedule)`` registers ``overlap_f_b`` with a torch
``_PipelineScheduleRuntime`` (torch.distributed.pipelining; torchtitan's schedules are
instances of it), so every ``(aFx;bBy)OVERLAP_F_B`` / ``(aFx;bIy)OVERLAP_F_B`` action
runs its forward and backward concurrently, taking turns at the expert-parallel
all-to-alls (``fused``, ``baton``). ``apply_recompute`` sets the recomputation mode
of a stage's layers. ``attach(schedule, traces=[])`` also records each pair's overlap
trace (``trace``: the order of its halves' segments and exchanges, what the tests check
overlap with). Needs torch; never ortools.

Modules whose all-to-alls should overlap must wait for them through
``profiler.layers.program.wait_for`` (the ppplan layer modules do); any other module
runs correctly, with its halves simply taking turns at no comm point.
"""

from __future__ import annotations

import functools
from typing import Any

from planner.runtime.fused import overlap_f_b, split_pair
from planner.runtime.recompute import RECOMPUTE_MODES, apply_recompute
from planner.runtime.trace import PairTrace

__all__ = ["attach", "overlap_f_b", "split_pair", "apply_recompute", "RECOMPUTE_MODES", "PairTrace"]


def attach(schedule: Any, *, timeout_s: float = 600.0, traces: list[PairTrace] | None = None) -> Any:
    """Register the overlap function for ``OVERLAP_F_B`` on ``schedule`` (a torch
    ``_PipelineScheduleRuntime``) and return it. ``timeout_s``: how long one half of a
    pair may wait for the other to hand over (use the process group's timeout).
    ``traces``: when given, each pair run appends its ``PairTrace`` (order and times of
    its halves' segments and exchanges, [Note: overlap trace]); off by default."""
    from torch.distributed.pipelining.schedules import OVERLAP_F_B

    schedule.register_custom_function(OVERLAP_F_B, functools.partial(overlap_f_b, timeout_s=timeout_s,
                                                                      traces=traces))
    return schedule
