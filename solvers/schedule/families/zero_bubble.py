"""Zero-bubble schedule generators (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024).

Backward is split into the input-gradient I (on the critical path) and the
weight-gradient W (free to move). Each generator (``zb_h1``, ``zb_h2``, ``zb_v``) returns
the order for the uniform picture F = I = W
(``solvers.schedule.engines.list_scheduler.unit_costs``), drawn by the greedy list
scheduler under the paper's memory limits; ``solvers.schedule.engines.w_fill.fill_w``
and ``list_schedule`` adapt it to real, unequal stage costs. Per stage all generators
keep microbatch order; their W tasks hold no memory in the unit picture, so where W
lands is decided again with real costs.
"""

from __future__ import annotations

from planner.core.placement import stage_ranks
from planner.core.schedule import Schedule
from solvers.schedule.engines.list_scheduler import unit_order

__all__ = ["zb_h1", "zb_h2", "zb_v"]


def zb_h1(pp: int, microbatches: int) -> Schedule:
    """ZB-H1: 1F1B memory (p - r in flight on rank r, p x M_B on rank 0), W deferred into
    the cool-down bubbles: bubble (p-1)(F+B-W) in the paper."""
    return unit_order(pp, microbatches, stage_ranks(pp, pp), [pp - r for r in range(pp)])


def zb_h2(pp: int, microbatches: int) -> Schedule:
    """ZB-H2: 2(p - r) - 1 in flight on rank r (memory (2p-1) x M_B), W deferred into
    bubbles: enough extra warm-up forwards to cover the wait for the first input-gradient;
    near-zero bubble."""
    return unit_order(pp, microbatches, stage_ranks(pp, pp), [2 * (pp - r) - 1 for r in range(pp)])


def zb_v(pp: int, microbatches: int) -> Schedule:
    """ZB-V: V placement with two stages per rank (stage s on rank s going down, on rank
    2p-1-s coming back; ``planner.core.placement.stage_ranks(2p, p, "v")``), p microbatches
    of the rank's activations in flight per rank (the same peak as 1F1B); Qi et al.,
    "Pipeline Parallelism with Controllable Memory" (NeurIPS 2024)."""
    return unit_order(pp, microbatches, stage_ranks(2 * pp, pp, "v"), [pp] * pp)
