"""DualPipeV-like schedule (``--schedule dualpipev-list``): V placement with forward/backward
pairs fused into ``OVERLAP_F_B`` actions by the list scheduler. DeepSeek's own order is
``solvers.schedule.families.dualpipev_exact`` (``--schedule dualpipev``).

DeepSeek-V3's DualPipe (technical report, section 3.2.1) overlaps the forward of one
microbatch with the backward of another so that one's all-to-all hides behind the
other's compute; DualPipeV (the "cut-in-half" variant, torch's ``DualPipeV``) runs it
on p ranks with two stages each in V placement. Here the order comes from the greedy
list scheduler with fusion on (``solvers.schedule.engines.list_scheduler``): whenever a rank has a
forward and an input-gradient of different microbatches ready, it runs them as one
fused action; W tasks fill the gaps. Memory: p + 1 microbatches of the rank's
activations in flight (DualPipe keeps PP + 1). With real costs, ``list_schedule(...,
fuse=True)`` fuses only pairs whose overlapped time beats running them one after the
other.
"""

from __future__ import annotations

from planner.core.placement import stage_ranks
from planner.core.schedule import Schedule
from solvers.schedule.engines.list_scheduler import unit_order

__all__ = ["dualpipev_list"]


def dualpipev_list(pp: int, microbatches: int) -> Schedule:
    """The ``dualpipev-list`` family: V placement, two stages per rank, fused F&B pairs in the steady state."""
    return unit_order(pp, microbatches, stage_ranks(2 * pp, pp, "v"), [pp + 1] * pp, fuse=True)
