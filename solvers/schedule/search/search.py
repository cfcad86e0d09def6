"""The best schedule for given stage costs (families by name: ``solvers.schedule.families.registry``).

``best_schedule`` adapts every applicable heuristic to the stage costs
(``solvers.schedule.search.candidates``), optionally improves the best with CP-SAT, and returns
the fastest valid schedule with its lower bound and gap:

1. every generator of the placement (``generate``), as drawn and with W tasks moved
   into the real gaps (``solvers.schedule.engines.w_fill.fill_w``), plus the planner's own start;
2. the cost-aware greedy list scheduler (``solvers.schedule.engines.list_scheduler``) under the memory
   budget and under p and 2p microbatches of activations, fused and not;
3. ``cpsat``: CP-SAT warm-started from the best of those (``solvers.schedule.cpsat.solve``);
   ``auto`` runs it too, within the same time limit, when the best heuristic is more
   than 1% above the lower bound.

With ``objective="steady"`` the candidates are ranked by their steady-state period, the
orders built for it (``solvers.schedule.search.steady_order``, [Note: steady tail]) join them,
and the period search (``solvers.schedule.search.steady_search``, [Note: period search]) takes
the place of CP-SAT unless the best is at ``steady_lower_bound`` already.

Every candidate is simulated (per-rank activation budget, deadlines) and the fastest
is validated, the next if it fails, and so on ([Note: lazy validation]); ties go to
the earlier candidate, so the choice is deterministic.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from planner.core.errors import BudgetExhausted, InfeasibleError, InputError
from planner.core.meter import WorkMeter
from planner.core.schedule import Key, Schedule
from planner.core.stage_costs import StageCosts
from planner.core.steady import steady_state
from planner.core.validate import validate
from solvers.schedule.search.budget import Deadline, check_time_limit
from solvers.schedule.search.deadlines import check_deadlines
from solvers.schedule.search.lower_bound import step_lower_bound
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.schedule.search.steady_order import steady_lower_bound, steady_orders
from solvers.schedule.search.steady_search import improve_period
from solvers.schedule.search.candidates import clear_memo, from_start, limits, simulated, verdict
from solvers.schedule.families.registry import (EXACT_FAMILIES, SCHEDULE_CHOICES, SCHEDULES, ScheduleKind,
                                       candidate_schedules, check_schedule_option, fuses, generate)

__all__ = ["ScheduleKind", "SCHEDULES", "SCHEDULE_CHOICES", "generate",
           "candidate_schedules", "check_schedule_option", "ScheduleChoice", "best_schedule",
           "EXACT_FAMILIES", "clear_memo", "OBJECTIVES", "check_objective"]


WALL_SLACK_S = 0.02
"""CP-SAT that returns with less than this left of its wall deadline was stopped by it."""


@dataclass(frozen=True, kw_only=True)
class ScheduleChoice:
    """The chosen schedule and how it compares with the limit."""

    schedule: Schedule
    """Per-rank actions."""
    name: str
    """Where it came from, e.g. ``zb-h2+w-fill``, ``greedy@2p``, ``cpsat-lns(zb-h2+w-fill)``."""
    status: str
    """HEURISTIC (no CP-SAT), OPTIMAL or FEASIBLE (CP-SAT ran), as ``solver.status`` reports."""
    step_time: float
    """Simulated step time, seconds."""
    lower_bound: float
    """``solvers.schedule.search.lower_bound.step_lower_bound`` for these costs and budget."""
    gap: float
    """step_time / lower_bound - 1."""
    wall_s: float
    """Seconds spent choosing."""
    tried: list[dict] = field(default_factory=list)
    """Each candidate's name, step time (or why it was rejected)."""


def _check(schedule: Schedule, costs: StageCosts, m: int, act_limit: list[int] | None,
           deadlines: dict[Key, float], meter: WorkMeter | None) -> tuple[float | None, str]:
    """Simulated step time if valid (structure, deadlines, per-rank budget), else None and why."""
    found = validate(schedule, costs, num_microbatches=m, meter=meter)
    if found:
        return None, str(found[0])
    return limits(schedule, costs, act_limit, deadlines, meter)


OBJECTIVES = ("makespan", "steady")
"""What the search minimises: one step's makespan (a global barrier between steps) or the
steady-state period of repeated steps ([Note: steady state] in ``planner.core.steady``)."""


def check_objective(objective: str) -> None:
    """``InputError`` unless ``objective`` is one of ``OBJECTIVES``."""
    if objective not in OBJECTIVES:
        raise InputError("--objective", f"unknown objective {objective!r}", f"use one of {', '.join(OBJECTIVES)}")


def _gap(step: float, bound: float) -> float:
    """step / bound - 1; float noise below zero (sums in another order) reads as 0."""
    gap = step / bound - 1 if bound > 0 else 0.0
    return 0.0 if -1e-9 < gap < 0 else gap


def _check_options(method: str, time_limit: float, seed: int) -> None:
    if method not in SCHEDULE_CHOICES:
        raise InputError("--schedule", f"unknown schedule {method!r}", f"use one of {', '.join(SCHEDULE_CHOICES)}")
    check_time_limit(time_limit)
    if seed < 0:
        raise InputError("--seed", f"must be >= 0, got {seed}", "e.g. --seed 0")


def _polish(costs: StageCosts, m: int, best: tuple[str, float, Schedule], act_limit, deadlines, *,
            limit: float, seed: int, workers: int | None, tried: list[dict], wall: Deadline | None,
            meter: WorkMeter | None):
    """CP-SAT from ``best``; returns (status, the better of the two). CP-SAT's own wall
    limit is what is left of ``wall`` ([Note: kept budget])."""
    from solvers.schedule.cpsat.solve import cpsat_improve  # ortools: only when searching

    name, t, sched = best
    wall_s = None if wall is None else max(0.05, wall.left())
    out = cpsat_improve(costs, m, sched, activation_limit=act_limit, deadlines=deadlines, time_limit=limit,
                        seed=seed, workers=workers, fuse=fuses(costs), wall_s=wall_s, meter=meter)
    if wall is not None and wall.left() < WALL_SLACK_S:
        wall.cut()  # CP-SAT ran to the wall deadline, not to its deterministic limit
    status = out.status if out.status in ("OPTIMAL", "FEASIBLE") else "FEASIBLE"
    if out.schedule is not None:
        t2, why = _check(out.schedule, costs, m, act_limit, deadlines, meter)
        tried.append({"schedule": out.method, "step_time_s": t2, "status": why})
        if t2 is not None and t2 < t - 1e-12:
            return status, (f"{out.method}({name})", t2, out.schedule)
    return status, best


STEADY_WORK_PER_S = 400_000
"""Simulated actions per second of ``time_limit`` the period search may spend ([Note:
period search]): a reproducible budget, about that many seconds on the 2-core reference
machine (each move re-times the schedule over ``planner.core.steady.STEPS`` steps)."""


def _steady_polish(costs: StageCosts, m: int, best: tuple[str, float, Schedule], act_limit, deadlines, *,
                   limit: float, seed: int, tried: list[dict], wall: Deadline | None, meter: WorkMeter | None):
    """The period search from ``best`` ([Note: period search]) unless its period is at
    ``steady_lower_bound`` already; returns the better valid one of the two."""
    name, t, sched = best
    if wall is not None and wall.expired() or \
            steady_state(sched, costs, m).period_s <= steady_lower_bound(costs, m) * (1 + 1e-9):
        return best
    found = improve_period(sched, costs, m, activation_limit=act_limit, work=int(limit * STEADY_WORK_PER_S),
                           seed=seed, deadline=wall)
    if found.period_s >= found.start_period_s * (1 - 1e-9):  # float noise is no gain
        return best
    t2, why = _check(found.schedule, costs, m, act_limit, deadlines, meter)
    tried.append({"schedule": f"steady-ls({name})", "step_time_s": t2, "status": why,
                  "steady_step_time_s": found.period_s})
    return (f"steady-ls({name})", t2, found.schedule) if t2 is not None else best


def _until(items, wall: Deadline | None, *, keep: int):
    """``items`` (a lazy iterable) until ``wall`` expires, always the first ``keep``."""
    for k, item in enumerate(items):
        if k >= keep and wall is not None and wall.expired():
            return
        yield item


def _best_candidate(costs: StageCosts, m: int, act_limit, deadlines, method: str,
                    start: tuple[str, Schedule] | None, tried: list[dict],
                    heuristics: bool = True, wall: Deadline | None = None,
                    objective: str = "makespan", meter: WorkMeter | None = None,
                    guard: bool = False) -> tuple[str, float, Schedule]:
    """Fastest valid heuristic candidate; ``InfeasibleError`` naming a reason when none is.
    "Fastest" is by makespan, or with ``objective="steady"`` by steady-state period
    (``planner.core.steady``; ties by makespan).

    [Note: lazy validation] Every candidate is simulated (step time, memory budget,
    deadlines); the full validator then runs on them fastest first (ties: earlier
    candidate) until one passes, so its cost is paid once per call, not per candidate.
    Candidates slower than the chosen one are recorded as ``simulated`` (not validated).
    """
    families = list(SCHEDULES) if method in ("auto", "cpsat") else [method]
    greedy = method in ("auto", "cpsat")
    ok: list[tuple[float, int, str, Schedule]] = []
    if start is not None and wall is not None and wall.expired():
        # [Note: kept budget]: no time left to draw alternatives; a guarded start (a baseline
        # partition the plan must not fall behind) still gets its own W-fill
        own, pool = (from_start(costs, act_limit, deadlines, families, start, greedy) if guard else [start]), []
    elif heuristics or start is None:
        own, pool = from_start(costs, act_limit, deadlines, families, start, greedy), \
            simulated(costs, m, act_limit, deadlines, families, greedy, wall, have_valid=start is not None,
                      meter=meter)
    else:  # the start is the best heuristic already
        own, pool = [start], []
    if objective == "steady" and greedy and (heuristics or start is None):
        own = [*own, *steady_orders(costs, m, act_limit)]  # [Note: steady tail]
    own = [(name, sched, *verdict(sched, costs, act_limit, deadlines, meter)) for name, sched in
           _until(own, wall, keep=2 if guard else 1 if start is not None else 0)]  # guard: start + its W-fill
    for name, sched, t, why in own + pool:
        if not isinstance(sched, dict):
            tried.append({"schedule": name, "status": why})
            continue
        tried.append({"schedule": name, "step_time_s": t, "status": why if t is None else "simulated"})
        if t is not None:
            ok.append((t, len(tried) - 1, name, sched))
    if objective == "steady":  # fastest makespan first, so a cut keeps the likeliest ([Note: kept budget])
        for t, k, name, sched in _until(sorted(ok, key=lambda c: (c[0], c[1])), wall, keep=1):
            tried[k]["steady_step_time_s"] = steady_state(sched, costs, m).period_s
        ok.sort(key=lambda c: (tried[c[1]].get("steady_step_time_s", math.inf), c[0], c[1]))
    for t, k, name, sched in sorted(ok, key=lambda c: (c[0], c[1])) if objective != "steady" else ok:
        found = validate(sched, costs, num_microbatches=m, meter=meter)
        tried[k]["status"] = str(found[0]) if found else "valid"
        if not found:
            return name, t, sched
    reasons = [f"{d['schedule']}: {d['status']}" for d in tried if d["status"] != "valid"]
    why = next((r for r in reasons if "deadline" in r), reasons[0] if reasons else "no candidate")
    if wall is not None and wall.name in wall.budget.cuts:  # the draw was cut: nothing is proven
        raise BudgetExhausted(f"no schedule drawn before the time limit meets the limits ({why})",
                              "raise --time-limit")
    raise InfeasibleError(f"no schedule meets the limits ({why}); raise --memory-limit, relax "
                          "--deadline or try --schedule auto")


def best_schedule(costs: StageCosts, *, microbatches: int, memory_limit: MemoryLimit | None = None,
                  deadlines: dict[Key, float] | None = None, method: str = "auto",
                  time_limit: float = 10.0, seed: int = 0, workers: int | None = None,
                  start: tuple[str, Schedule] | None = None, polish: bool = True,
                  heuristics: bool = True, deadline: Deadline | None = None,
                  objective: str = "makespan", meter: WorkMeter | None = None,
                  guard: bool = False) -> ScheduleChoice:
    """The fastest valid schedule for ``costs`` (see the module docstring).

    ``method`` is a family name (its order; for zero-bubble and V families also its
    W-filled versions; see ``EXACT_FAMILIES``), ``auto`` or
    ``cpsat``; ``start`` is an extra (name, schedule) candidate such as the planner's;
    ``polish=False`` skips CP-SAT (heuristics only, for searches that call this often);
    ``heuristics=False`` takes ``start`` as the best heuristic already (it was chosen
    among them for these costs) and only polishes it. ``deadline`` (a phase of a
    ``WallBudget``) stops drawing heuristics and caps CP-SAT's wall time ([Note: kept
    budget]); without it only the reproducible budgets apply. ``meter`` (the plan's
    ``WorkMeter``) is charged every action the search times ([Note: timed actions] in
    ``planner.core.meter``). ``guard`` keeps ``start`` and its W-fill even past ``deadline``
    (a baseline partition the plan must not fall behind). ``objective="steady"``
    ranks candidates by steady-state period ([Note: steady state] in
    ``planner.core.steady``), adds the orders built for it and runs the period search
instead of CP-SAT, whose model minimises the makespan.
    Raises ``InfeasibleError`` when the memory limit is below one microbatch in flight
    per stage, when a deadline precedes its task's earliest finish, or when no
    candidate meets them.
    """
    t0 = time.perf_counter()
    _check_options(method, time_limit, seed)
    check_objective(objective)
    deadlines = deadlines or {}
    act_limit = None
    if memory_limit is not None:
        memory_limit.check_minimum(costs)
        act_limit = memory_limit.activation_limit(costs)
    check_deadlines(costs, deadlines)
    tried: list[dict] = []
    best = _best_candidate(costs, microbatches, act_limit, deadlines, method, start, tried, heuristics, deadline,
                           objective, meter, guard)
    lb = step_lower_bound(costs, microbatches, activation_limit=act_limit)
    name, t, sched = best
    at_bound = t <= lb * (1 + 1e-9)
    status = "OPTIMAL" if at_bound else "HEURISTIC"  # at the lower bound: nothing to search
    limit = 0.0 if at_bound or not polish else time_limit if method == "cpsat" else \
        time_limit if method == "auto" and t > 1.01 * lb else 0.0
    if objective == "steady":
        if polish and method in ("auto", "cpsat"):
            name, t, sched = _steady_polish(costs, microbatches, (name, t, sched), act_limit, deadlines,
                                            limit=time_limit, seed=seed, tried=tried, wall=deadline, meter=meter)
        limit = 0.0
    elif limit > 0 and deadline is not None and deadline.expired():
        limit = 0.0
    if limit > 0:
        status, (name, t, sched) = _polish(costs, microbatches, (name, t, sched), act_limit, deadlines,
                                           limit=limit, seed=seed, workers=workers, tried=tried,
                                           wall=deadline, meter=meter)
    return ScheduleChoice(schedule=sched, name=name, status=status, step_time=t, lower_bound=lb,
                          gap=_gap(t, lb), wall_s=time.perf_counter() - t0,
                          tried=tried)
