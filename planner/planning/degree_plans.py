"""``plan(..., gpus=N)``: search the parallel degrees, plan the best few fully, keep the fastest.

The ranked table (``planner.planning.degrees``) and the reason the winner won are stored
in the plan under ``solver.degrees``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from planner.core.cluster import ClusterSpec
from planner.core.errors import InfeasibleError, InputError
from planner.core.model import ModelSpec
from planner.core.plan import Plan
from planner.planning.degrees import degree_table, search_degrees, why_first
from planner.planning.dp_step import optimizer_step_time
from planner.progress import note, phase

__all__ = ["plan_for_gpus", "FULLY_PLANNED"]

FULLY_PLANNED = 2
"""Configurations of the ranked table planned fully (partition and schedule search)."""


def plan_for_gpus(plan_fn: Callable[..., Plan], model_name: str, spec: ModelSpec, base: ClusterSpec,
                  gpus: int, *, work: float, time_limit: float | None, started: float | None = None,
                  options: dict[str, Any]) -> Plan:
    """Rank degrees for ``gpus`` GPUs, plan the top ``FULLY_PLANNED`` with ``plan_fn`` (each with
    an equal share of ``work``, and of what the screen left of the ``time_limit`` wall cap
    from ``started``) and return the fastest plan, the table attached."""
    for name in ("pp", "vpp", "tp", "ep", "dp"):
        if options.get(name) is not None:
            raise InputError("--gpus", f"given together with --{name}",
                             "pass --gpus alone (the search chooses every degree) or the degrees alone")
    start = time.perf_counter()
    phase("degree search")
    ranked = search_degrees(spec, base, gpus)
    note(f"{len(ranked)} configurations ranked, best estimate {ranked[0].label}" if ranked else "none fits")
    screen_s = time.perf_counter() - start
    best, planned = None, []
    for k, choice in enumerate(ranked[:FULLY_PLANNED]):
        cap = None
        if time_limit is not None:  # an equal share of what is left of the wall cap for each plan still to make
            left = time_limit - (time.perf_counter() - (start if started is None else started))
            cap = max(0.05, left / (FULLY_PLANNED - k))
        phase(f"planning {choice.label} ({k + 1}/{min(FULLY_PLANNED, len(ranked))})")
        try:
            p = plan_fn(model_name, cluster=choice.cluster, work=work / FULLY_PLANNED, time_limit=cap, **options)
        except InfeasibleError:
            planned.append({"config": choice.label, "step_time_s": None})
            continue
        step = optimizer_step_time(p)  # schedule + exposed DP traffic + Adam step
        planned.append({"config": choice.label, "step_time_s": step})
        if best is None or step < optimizer_step_time(best):
            best = p
    if best is None:
        raise InfeasibleError(f"none of the {len(planned)} best degree choices for {gpus} GPUs could be planned "
                              "within memory; lower the global batch or add GPUs")
    best.solver["degrees"] = {"gpus": gpus, "table": degree_table(ranked), "why": _why(ranked, planned),
                              "fully_planned": planned, "screen_s": round(screen_s, 2)}
    return best


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
            "(its even partition and bubble formula differ from the simulated plans)")
