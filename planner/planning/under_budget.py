"""Screening under the memory budget: the orders built for the limit, when no family's fits.

Each family's order (1F1B, ZB-H1, ZB-H2, ...) holds a fixed number of microbatches in
flight; below that on some rank, none of them fits whatever the partition, although
orders that admit a forward only while the rank's activation budget allows (the greedy
list scheduler, a family order with its weight-gradients moved under the budget) do. So
when screening every family leaves no candidate, each (table, count) is screened once
more here before anything is declared infeasible:

1. partition for an order that holds one microbatch per stage (``unit_order`` with one
   microbatch in flight per rank): under a byte limit, no partition fitting means no
   order fits at all, which the partition search proves or reports as unproven
   ([Note: unproven] in ``solvers.partition.search``);
2. on each candidate partition (and the fitting baselines), the heuristics of the
   requested method under the budget (``best_schedule`` without CP-SAT: for ``auto`` and
   ``cpsat`` the greedy list scheduler always finds an order once one microbatch per
   stage fits, ``MemoryLimit.check_minimum``; a named family's own order with its
   weight-gradients moved under the budget); the fastest is the trial.
"""

from __future__ import annotations

from planner.core.costs import CostTable
from planner.core.errors import BudgetExhausted, InfeasibleError
from planner.core.placement import stage_ranks
from planner.core.simulate import compile_schedule
from planner.core.stage_costs import stage_costs
from solvers.partition.search import partition_for_schedule
from solvers.schedule.search.budget import Deadline, meter_of
from solvers.schedule.engines.list_scheduler import unit_order
from solvers.schedule.search.search import best_schedule, generate
from planner.planning.records import PlanRequest, Trial, memory_limit_of
from planner.planning.steps import baseline_partitions, partition_options, screen_entry

__all__ = ["UNDER_BUDGET", "screen_under_budget"]

UNDER_BUDGET = "under-budget"
"""``schedule`` of the ``tried`` record of this screening (the order found is named beside it)."""


def screen_under_budget(table: CostTable, req: PlanRequest, tried: list[dict], budget: float,
                        deadline: Deadline | None = None) -> Trial | None:
    """One (table, count) screened with orders built under the memory budget (module doc);
    records what happened in ``tried``. ``budget``: CP-SAT seconds for the partition."""
    entry = screen_entry(req, UNDER_BUDGET, tried)
    ranks = stage_ranks(req.pp * req.vpp, req.pp, req.placement)
    lean = unit_order(req.pp, req.microbatches, ranks, [1] * req.pp)
    try:
        part = partition_for_schedule(table, lean, method=req.partition, **partition_options(req, budget))
    except InfeasibleError as exc:  # BudgetExhausted too: not proven ([Note: unproven])
        entry.update(status="budget" if isinstance(exc, BudgetExhausted) else "infeasible", reason=str(exc))
        return None
    baselines = baseline_partitions(table, lean, req, budget, entry)
    pool = list(part.candidates) + [b for b, fits in baselines.values() if fits and b not in part.candidates]
    named = req.schedule not in ("auto", "cpsat")  # the family's own order, W moved under the budget
    start = (req.schedule, generate(req.schedule, pp=req.pp, vpp=req.vpp, microbatches=req.microbatches)) \
        if named else None
    best, refused = None, None
    for bounds in pool:
        try:
            choice = best_schedule(stage_costs(table, bounds, ranks), microbatches=req.microbatches,
                                   memory_limit=memory_limit_of(req), deadlines=req.deadlines,
                                   method=req.schedule, seed=req.seed, start=start, polish=False, deadline=deadline,
                                   objective=req.objective, meter=meter_of(deadline))
        except InfeasibleError as exc:
            refused = refused if isinstance(refused, BudgetExhausted) else exc
            continue
        if best is None or choice.step_time < best[0].step_time:
            best = (choice, bounds)
    entry.update(partition_solver=part.solver, partition_status=part.status, evaluated=len(pool))
    if best is None:
        entry.update(status="budget" if isinstance(refused, BudgetExhausted) else "infeasible",
                     reason=str(refused))
        return None
    choice, bounds = best
    entry.update(status="valid", order=choice.name, step_time_s=choice.step_time,
                 stage_layers=[b - a for a, b in bounds])
    comp = compile_schedule(choice.schedule, len(ranks), ranks)
    return Trial(table, req, choice.name, choice.schedule, comp, part, bounds, choice.step_time, baselines)
