"""``plan(..., gpus=N)``: search the parallel degrees, plan the best few fully, keep the fastest.

The ranked table (``planner.planning.degrees``), what the screen spent and the reason the
winner won are stored in the plan under ``solver.degrees``; the screen's cut, if any, heads
the plan's ``solver.budget`` cut phases ([Note: screen work]).
"""

from __future__ import annotations

import time
from dataclasses import replace
from collections.abc import Callable
from typing import Any

from planner.core.cluster import ClusterSpec
from planner.core.errors import BudgetExhausted, InfeasibleError, InputError
from planner.core.offload import CHOICE_SEP
from planner.core.model import ModelSpec
from planner.core.plan import Plan
from planner.planning.degrees import DegreeChoice, DegreeSearch, degree_table, search_degrees, why_first
from planner.planning.dp_step import optimizer_step_time
from planner.progress import note, phase
from solvers.schedule.search.budget import WallBudget

__all__ = ["plan_for_gpus", "FULLY_PLANNED", "SCREEN_SHARE", "SCREEN_PHASE"]

FULLY_PLANNED = 2
"""Configurations of the ranked table planned fully (partition and schedule search)."""

SCREEN_SHARE = 0.3
"""Share of ``--work`` (and of the ``--time-limit`` cap, from the start) the degree screen
spends ([Note: screen work] in ``planner.planning.degrees``); the full plans split the rest."""

SCREEN_PHASE = "degree screen"
"""The screen's name in the plan's budget record (``cut_phases``, ``work_cut_phases``)."""


def plan_for_gpus(plan_fn: Callable[..., Plan], model_name: str, spec: ModelSpec, base: ClusterSpec,
                  gpus: int, *, work: float, time_limit: float | None, started: float | None = None,
                  options: dict[str, Any]) -> Plan:
    """Rank degrees for ``gpus`` GPUs within ``SCREEN_SHARE`` of ``work`` (and of the
    ``time_limit`` wall cap from ``started``), plan the top ``FULLY_PLANNED`` with ``plan_fn``
    (each with an equal share of the rest) and return the fastest plan, the table attached."""
    if base.devices:
        raise InputError("--gpus", "the cluster file lists device groups; the degree search plans one GPU type",
                         "leave out --gpus (the groups fix the GPUs), or plan a cluster without devices")
    if CHOICE_SEP in base.training.offload:  # else the cost model's "a cost table is for one mode"
        raise InputError("training.offload", "a choice of offloading modes with --gpus (the degree search "
                         "plans one mode)", "give one mode, or the degrees (--pp/--tp/--dp) instead of --gpus")
    if gpus % base.sites.count:
        raise InputError("--gpus", f"{gpus} GPUs do not split evenly over {base.sites.count} sites",
                         f"use a multiple of {base.sites.count}")
    for name in ("pp", "vpp", "tp", "ep", "dp"):
        if options.get(name) is not None:
            raise InputError("--gpus", f"given together with --{name}",
                             "pass --gpus alone (the search chooses every degree) or the degrees alone")
    wall = WallBudget(None if time_limit is None else time_limit * SCREEN_SHARE, start=started)
    phase("degree search")
    search = search_degrees(spec, base, gpus, work=work * SCREEN_SHARE, deadline=wall.phase(SCREEN_PHASE))
    note(f"{len(search.ranked)} configurations ranked, best estimate {search.ranked[0].label}")
    screen_s = time.perf_counter() - wall.start
    best, planned, unproven = _plan_top(plan_fn, model_name, search.ranked, work=work * (1 - SCREEN_SHARE),
                                        time_limit=time_limit, start=wall.start, options=options)
    if best is None:
        _no_plan(gpus, len(planned), unproven or search.work_cut or search.wall_cut)
    degrees = {"gpus": gpus, "table": degree_table(search.ranked), "why": _why(search.ranked, planned),
               "fully_planned": planned, "screen": {**search.record(), "wall_s": round(screen_s, 2)}}
    best.solver = replace(best.solver, degrees=degrees)
    _record_budget(best, search, work, time_limit)
    return best


def _plan_top(plan_fn: Callable[..., Plan], model_name: str, ranked: list[DegreeChoice], *, work: float,
              time_limit: float | None, start: float, options: dict[str, Any]) -> tuple[Plan | None, list[dict], bool]:
    """Plan the first ``FULLY_PLANNED`` of ``ranked``, each with an equal share of ``work`` and of
    what is left of the wall cap: (the fastest plan or None, each one's optimizer step, whether
    one failed only for want of budget)."""
    best, planned, unproven = None, [], False
    for k, choice in enumerate(ranked[:FULLY_PLANNED]):
        cap = None
        if time_limit is not None:  # an equal share of what is left of the wall cap for each plan still to make
            cap = max(0.05, (time_limit - (time.perf_counter() - start)) / (FULLY_PLANNED - k))
        phase(f"planning {choice.label} ({k + 1}/{min(FULLY_PLANNED, len(ranked))})")
        try:
            p = plan_fn(model_name, cluster=choice.cluster, work=work / FULLY_PLANNED, time_limit=cap, **options)
        except InfeasibleError as exc:
            budget = isinstance(exc, BudgetExhausted)
            unproven = unproven or budget
            planned.append({"config": choice.label, "step_time_s": None,
                            "status": "budget" if budget else "infeasible"})
            continue
        step = optimizer_step_time(p)  # schedule + exposed DP traffic + Adam step
        planned.append({"config": choice.label, "step_time_s": step})
        if best is None or step < optimizer_step_time(best):
            best = p
    return best, planned, unproven


def _no_plan(gpus: int, tried: int, unproven: bool) -> None:
    """Raise for no full plan: infeasible only when the screen was complete and every plan proven so."""
    what = (f"none of the {tried} best degree choices for {gpus} GPUs could be planned within memory")
    if unproven:
        raise BudgetExhausted(f"{what} within the budget (the screen or a plan was cut short)")
    raise InfeasibleError(f"{what}; lower the global batch or add GPUs")


def _record_budget(plan: Plan, search: DegreeSearch, work: float, time_limit: float | None) -> None:
    """The plan's ``solver.budget`` for the whole request: the user's ``--work`` and
    ``--time-limit`` (the plan's own shares kept beside them) and the screen's cut first."""
    budget = dict(plan.solver.budget or {})
    budget.update(plan_work=budget.get("work"), plan_time_limit_s=budget.get("time_limit_s"), work=work,
                  time_limit_s=time_limit)
    if search.wall_cut:
        budget["cut_phases"] = [SCREEN_PHASE, *budget.get("cut_phases", [])]
        budget["bound"] = True
    if search.work_cut:
        budget["work_cut_phases"] = [SCREEN_PHASE, *budget.get("work_cut_phases", [])]
    plan.solver = replace(plan.solver, budget=budget)


def _why(ranked: list, planned: list[dict]) -> str:
    """Why the plan's configuration won: the full plans' optimizer steps (simulated schedule +
    exposed DP traffic + Adam step), then the screen's reason."""
    done = sorted((p for p in planned if p["step_time_s"] is not None), key=lambda p: p["step_time_s"])
    if len(done) < 2:
        return why_first(ranked)
    first, second = done[0], done[1]
    lead = (f"{first['config']} won on its fully planned optimizer step ({first['step_time_s']:.3f} s vs "
            f"{second['step_time_s']:.3f} s for {second['config']})")
    if first["config"] == ranked[0].label:
        return f"{lead}; the estimate agrees: {why_first(ranked)}"
    return (f"{lead}, reversing the closed-form estimate, which put {ranked[0].label} first "
            "(its serial min-max partition and bubble formula differ from the simulated plans)")
