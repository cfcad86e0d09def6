"""The first valid plan: the cheapest order that fits, reported before the search starts.

[Note: first plan] Screening every family, the greedy list schedules and the W-fills
takes many times the Zero Bubble heuristic's time before anything valid is in hand. So
before the search, the planner takes the cheapest order that
fits: the serial-balanced partition (one layer per stage when counts match) under 1F1B
(PipeDream-flush, Narayanan et al. 2021) with each rank's microbatches in flight capped at
what its activation budget holds, validated as ``ppplan validate`` would. It is reported
at once (``planner.progress.milestone("first plan", ...)``) and the search then improves
on it. Where it does not apply (vpp > 1, a family named with ``--schedule``) or does not fit,
the first screened (family, partition) is reported instead when it validates. It times nothing on the plan's work meter and feeds nothing into the search, so
the final plan is the same with or without it, and it is not made when nobody would hear of it
(no progress bar open and no ``listening`` callback: ``planner.progress.heard``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from planner.core.costs import CostTable
from planner.core.errors import InfeasibleError
from planner.core.placement import stage_ranks
from planner.core.schedule import Schedule
from planner.core.stage_costs import stage_costs
from planner.planning.records import PlanRequest, evaluate, memory_limit_of
from planner.planning.steps import partition_options
from planner.progress import milestone
from solvers.partition.search import partition_for_schedule
from solvers.schedule.engines.memory_limit import rank_activation
from solvers.schedule.families.generators import one_f_one_b

__all__ = ["FirstPlan", "first_plan", "report_first_plan", "report_screened", "in_flight_caps"]


@dataclass(frozen=True, kw_only=True)
class FirstPlan:
    """The first valid (partition, order) of a plan and when it came."""

    schedule: str
    """``1f1b``, or ``1f1b-cap{c}`` when memory caps rank 0 at c microbatches in flight."""
    bounds: tuple[tuple[int, int], ...]
    """Layer range of each stage."""
    in_flight: tuple[int, ...] = ()
    """Microbatches in flight per rank (empty for a screened family's order)."""
    step_time_s: float
    """Simulated step time, seconds."""
    wall_s: float
    """Seconds from the plan's start (``PlanRequest.started_s``, else this call) to the plan."""


def in_flight_caps(pp: int, act: list[int], allowed: list[int] | None) -> list[int] | None:
    """Microbatches in flight per rank for 1F1B within ``allowed`` activation bytes per rank
    (``act`` bytes per microbatch); None when a rank cannot hold one microbatch.

    Without a binding budget this is 1F1B's own p - r. Under one, rank r gets
    ceil(C (p - r) / p) for the largest C that fits every rank: caps that never grow over
    the ranks (``one_f_one_b``'s rule) and fall by one every p / C ranks. Two neighbours
    with equal caps run in lockstep (the upper one's next forward waits for the lower
    one's backward), so the equal pairs are spread out rather than stacked on the first
    ranks, where they would chain into one long lockstep."""
    fit = [pp - r if allowed is None or act[r] <= 0 else min(pp - r, allowed[r] // act[r]) for r in range(pp)]
    for c in range(pp, 0, -1):
        caps = [-(-c * (pp - r) // pp) for r in range(pp)]
        if all(k <= f for k, f in zip(caps, fit)):
            return caps
    return None


def first_plan(table: CostTable, req: PlanRequest) -> FirstPlan | None:
    """1F1B within the memory budget on the serial-balanced partition, if the validator
    accepts it ([Note: first plan]); None for vpp > 1, a named family, or when it does not fit."""
    t0 = req.started_s if req.started_s is not None else time.perf_counter()
    if req.vpp != 1 or req.schedule not in ("auto", "cpsat"):
        return None
    stages = req.pp
    try:
        bounds = [(s, s + 1) for s in range(stages)] if table.num_layers == stages else \
            partition_for_schedule(table, one_f_one_b(req.pp, req.microbatches), method="serial", strict=False,
                                   **partition_options(req, 0.1)).candidates[0]
    except InfeasibleError:
        return None
    ranks = stage_ranks(stages, req.pp, req.placement)
    costs = stage_costs(table, bounds, ranks)
    limit = memory_limit_of(req)
    caps = in_flight_caps(req.pp, rank_activation(costs), None if limit is None else limit.activation_limit(costs))
    if caps is None:
        return None
    ev = evaluate(table, req, bounds, one_f_one_b(req.pp, req.microbatches, in_flight=caps))  # no meter
    if ev.violations:
        return None
    name = "1f1b" if caps == [req.pp - r for r in range(req.pp)] else f"1f1b-cap{caps[0]}"
    return FirstPlan(schedule=name, bounds=tuple(bounds), in_flight=tuple(caps), step_time_s=ev.sim.step_time,
                     wall_s=time.perf_counter() - t0)


def report_screened(table: CostTable, req: PlanRequest, bounds: list[tuple[int, int]], name: str,
                    schedule: Schedule) -> FirstPlan | None:
    """A screened (partition, family order) as the first plan, reported, if the validator
    accepts it (the screening checked its memory only); None when it does not."""
    t0 = req.started_s if req.started_s is not None else time.perf_counter()
    ev = evaluate(table, req, bounds, schedule)  # no meter ([Note: first plan])
    if ev.violations:
        return None
    return _report(FirstPlan(schedule=name, bounds=tuple(bounds), step_time_s=ev.sim.step_time,
                             wall_s=time.perf_counter() - t0))


def report_first_plan(table: CostTable, req: PlanRequest) -> FirstPlan | None:
    """``first_plan``, reported through ``planner.progress.milestone`` when there is one."""
    return _report(first_plan(table, req))


def _report(found: FirstPlan | None) -> FirstPlan | None:
    if found is not None:
        milestone("first plan", f"first plan {found.schedule} {found.step_time_s:.4g} s", schedule=found.schedule,
                  step_time_s=found.step_time_s, wall_s=found.wall_s, bounds=found.bounds,
                  in_flight=found.in_flight)
    return found
