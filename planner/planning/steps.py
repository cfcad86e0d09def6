"""The planner's steps: screen one (microbatches, schedule), refine, re-choose the order, record."""

from __future__ import annotations

import time
from dataclasses import replace


from planner.core.costs import CostTable
from planner.core.errors import BudgetExhausted, InfeasibleError
from planner.core.plan import Plan
from planner.core.simulate import compile_schedule
from planner.core.stage_costs import stage_costs
from planner.core.steady import steady_state
from solvers.partition.refine import refine_partition
from solvers.partition.search import partition_for_schedule
from solvers.schedule.search.budget import Deadline, WallBudget, meter_of
from solvers.schedule.search.lower_bound import step_lower_bound
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.schedule.search.search import ScheduleChoice, best_schedule, generate
from planner.planning.records import (BASELINES, Evaluation, PlanRequest, Trial, evaluate, memory_limit_of,
                                    pinned_of, simulate_bounds)

EVAL_PER_RETIME = 12
"""One evaluation (compile, simulate with trace, validate) against one re-timing of a compiled
schedule, measured on DeepSeek-V3 pp 32 vpp 2 M 1024 (6.2 s against about 0.3-0.5 s): the
screening's re-timings give the budget its first estimate of an evaluation's cost."""

__all__ = ["screen", "screen_entry", "partition_options", "baseline_partitions", "refine", "settle", "choose_schedule",
           "as_chosen", "record_schedule", "failure_reason", "why_winner"]


def settle(best: Trial, ev: Evaluation, deadline: Deadline | None = None) -> Evaluation:
    """Under the final schedule, keep the fastest valid of the plan's partition and the
    baseline partitions that fit (the order was adapted to the plan's costs, so a baseline
    could now be faster: then it is the plan, and the plan never loses to a baseline).
    Stops at ``deadline`` ([Note: kept budget] in ``solvers.schedule.search.budget``)."""
    if best.req.partition != "overlap":
        return ev
    for bounds, fits in best.baselines.values():
        if not fits or bounds == ev.bounds:
            continue
        if deadline is not None and not deadline.affords(1):
            break
        other = evaluate(best.table, best.req, bounds, best.schedule, meter=meter_of(deadline))
        goal = best.req.objective
        if not other.violations and other.time_for(goal) < ev.time_for(goal) * (1 - 1e-12):
            ev = other
    best.bounds, best.step = ev.bounds, ev.sim.step_time
    return ev


def choose_schedule(best: Trial, ev: Evaluation, time_limit: float | None = None, *,
                    polish: bool = True, heuristics: bool = True,
                    deadline: Deadline | None = None, guard: bool = False) -> ScheduleChoice:
    """Heuristics (+ CP-SAT for auto/cpsat, within ``time_limit``, default the request's) on
    the plan's stage costs (solvers.schedule.search.search), ranked by the request's objective;
    ``guard``: the start's W-fill is drawn even past ``deadline``."""
    req = best.req
    return best_schedule(ev.costs, microbatches=req.microbatches, memory_limit=memory_limit_of(req),
                         deadlines=req.deadlines, method=req.schedule,
                         time_limit=req.work_s if time_limit is None else time_limit,
                         seed=req.seed, start=(best.name, best.schedule), polish=polish,
                         heuristics=heuristics, deadline=deadline, objective=req.objective,
                         meter=meter_of(deadline), guard=guard)


def as_chosen(best: Trial, ev: Evaluation) -> ScheduleChoice:
    """``best``'s order kept as it is (no time left to re-choose it: [Note: kept budget] in
    ``solvers.schedule.search.budget``), with its lower bound and gap."""
    limit = memory_limit_of(best.req)
    lb = step_lower_bound(ev.costs, best.req.microbatches,
                          activation_limit=None if limit is None else limit.activation_limit(ev.costs))
    step = ev.sim.step_time
    return ScheduleChoice(schedule=best.schedule, name=best.name, status="HEURISTIC", step_time=step,
                          lower_bound=lb, gap=max(0.0, step / lb - 1) if lb > 0 else 0.0, wall_s=0.0,
                          tried=[{"schedule": best.name, "step_time_s": step,
                                  "status": "kept: time limit reached before the polish"}])


def record_schedule(plan: Plan, choice: ScheduleChoice, limit: MemoryLimit | None) -> None:
    """Lower bound, schedule status and gap into the plan. The bound is ``to_plan``'s (same
    costs and activation budget as ``choice.lower_bound``)."""
    if limit is not None and limit.microbatches is not None:
        plan.predicted = replace(plan.predicted, memory_limit=str(limit))
    plan.solver = replace(plan.solver, schedule_solver={
        "name": choice.name, "status": choice.status, "gap": choice.gap,
        "lower_bound_s": choice.lower_bound, "wall_s": choice.wall_s, "candidates": choice.tried})


def screen(table: CostTable, req: PlanRequest, name: str, tried: list[dict], budget: float,
           shapes: dict | None = None, unit: WallBudget | None = None) -> Trial | None:
    """Partition and simulate one (count, schedule); records what happened in ``tried``.
    ``shapes`` memoises the generated and compiled order per (family, pp, vpp, count,
    placement): recomputation modes share it, and it depends on nothing else. A candidate
    is kept only within the memory limit as the validator checks it ([Note: one memory
    rule] in ``solvers.schedule.engines.memory_limit``); one that fails is recorded with its status
    and reason, and no time."""
    entry = screen_entry(req, name, tried)
    key = (name, req.pp, req.vpp, req.microbatches, req.placement)
    try:
        if shapes is not None and key in shapes:
            sched, comp = shapes[key]
        else:
            sched, comp = generate(name, pp=req.pp, vpp=req.vpp, microbatches=req.microbatches), None
            if shapes is not None:
                shapes[key] = (sched, None)
        part = partition_for_schedule(table, sched, method=req.partition, **partition_options(req, budget))
    except InfeasibleError as exc:  # BudgetExhausted too: recorded as not proven ([Note: unproven])
        entry.update(status="budget" if isinstance(exc, BudgetExhausted) else "infeasible", reason=str(exc))
        return None
    baselines = baseline_partitions(table, sched, req, budget, entry)
    ranks = part.model.ranks
    if comp is None:
        comp = compile_schedule(sched, len(ranks), ranks)
        if shapes is not None:
            shapes[key] = (sched, comp)
    pool = list(part.candidates)
    if req.partition == "overlap":
        pool += [b for b, fits in baselines.values() if fits and b not in pool]
    t0 = time.perf_counter()
    limit = memory_limit_of(req)
    meter = None if unit is None else unit.meter
    step, bounds = min(((simulate_bounds(table, comp, b, ranks, limit, meter=meter), k, b)
                        for k, b in enumerate(pool)), key=lambda t: (t[0], t[1]))[0::2]
    if unit is not None:  # an evaluation also compiles and validates: about EVAL_PER_RETIME re-timings
        unit.measured(EVAL_PER_RETIME * (time.perf_counter() - t0) / len(pool))
    found = {"estimate_s": part.estimate_s, "partition_solver": part.solver, "partition_status": part.status}
    if step == float("inf"):
        entry.update(status="infeasible", **found, evaluated=len(pool),
                     reason=f"no candidate partition fits the memory limit {limit} in simulation")
        return None
    entry.update(status="valid", step_time_s=step, **found, stage_layers=[b - a for a, b in bounds],
                 evaluated=len(pool))
    return Trial(table, req, name, sched, comp, part, bounds, step, baselines)


def screen_entry(req: PlanRequest, name: str, tried: list[dict]) -> dict:
    """The ``tried`` record of one screened (count, schedule), appended to ``tried``."""
    entry = {"microbatches": req.microbatches, "microbatch_size": req.microbatch_size, "schedule": name}
    if req.recompute is not None:
        entry["recompute"] = req.recompute
    tried.append(entry)
    return entry


def partition_options(req: PlanRequest, budget: float) -> dict:
    """``partition_for_schedule``'s options for ``req`` with ``budget`` CP-SAT seconds."""
    return dict(pp=req.pp, vpp=req.vpp, placement=req.placement, memory_limit_bytes=req.memory_limit_bytes,
                rank_memory_bytes=req.rank_memory_bytes,
                pins=req.pins, time_limit_s=budget, seed=req.seed)


def baseline_partitions(table: CostTable, sched, req: PlanRequest, budget: float, entry: dict) -> dict:
    """Label -> (bounds, fits memory) of each baseline partition for ``sched``; one that
    cannot be built is noted under ``entry["baseline_errors"]``."""
    baselines = {}
    for label, method in BASELINES:
        try:
            res = partition_for_schedule(table, sched, method=method, strict=False,
                                         **partition_options(req, budget))
            baselines[label] = (res.candidates[0], res.fits_memory)
        except InfeasibleError as exc:  # e.g. uniform with fewer decoder layers than stages
            entry.setdefault("baseline_errors", {})[label] = str(exc)
    return baselines


def refine(best: Trial, *, deadline: Deadline | None) -> dict:
    """Move boundaries under the simulator (overlap method only) until ``deadline``
    ([Note: kept budget] in ``solvers.schedule.search.budget``); updates ``best`` in place. With the
    steady objective a move is kept only when it does not lengthen the period."""
    if best.req.partition != "overlap":
        return {"rounds": 0, "evaluated": 0}
    limit = memory_limit_of(best.req)
    res = refine_partition(best.table, best.schedule, best.bounds, best.part.model.ranks,
                           fits=None if limit is None else limit.fits,
                           pinned=pinned_of(best), max_rounds=32,
                           deadline=None if deadline is None else deadline.at, compiled=best.compiled,
                           meter=meter_of(deadline), stop=None if deadline is None else deadline.expired)
    if deadline is not None:
        deadline.expired()  # records the cut when the moves stopped at the deadline
    if res.step_time < best.step and _period_kept(best, res.bounds):
        best.bounds, best.step = res.bounds, res.step_time
    return {"rounds": res.rounds, "evaluated": res.evaluated}


def _period_kept(best: Trial, bounds: list[tuple[int, int]]) -> bool:
    """Whether ``bounds`` keeps ``best``'s steady period (always true for the makespan objective)."""
    if best.req.objective != "steady":
        return True
    ranks = best.part.model.ranks
    old, new = (steady_state(best.schedule, stage_costs(best.table, b, ranks), best.req.microbatches,
                             compiled=best.compiled).period_s for b in (best.bounds, bounds))
    return new <= old * (1 + 1e-12)


def failure_reason(tried: list[dict]) -> str:
    """The most useful reason when nothing fits: a memory message if there is one."""
    reasons = [t.get("reason", "") for t in tried]
    memory = [r for r in reasons if "memory" in r]
    head = memory[0] if memory else (reasons[0] if reasons else "no schedule candidates")
    if len(tried) > 1:
        head += f" ({len(tried)} microbatch/schedule combinations tried, none fits)"
    return head



def why_winner(plan: Plan, tried: list[dict]) -> str:
    """One line on why the winner won: its step time against the runner-up's."""
    step = plan.predicted.step_time_s
    others = sorted({round(e["step_time_s"], 12) for e in tried
                     if e.get("step_time_s") not in (None, float("inf"))
                     and e.get("microbatches", 0) != 0} - {round(step, 12)})
    valid = sum(1 for e in tried if e.get("status") == "valid")
    text = (f"fastest simulated step ({step:.4g} s) among {valid} valid candidates that fit memory"
            f" ({len(tried)} tried)")
    slower = [o for o in others if o > step]
    if slower:
        text += f"; the next best screened or refined candidate takes {slower[0]:.4g} s" \
                f" ({slower[0] / step - 1:+.1%})"
    return text


