"""A choice of activation-offloading modes (``training.offload: [none, [expert_fc1, moe_act]]`` or
``--offload`` repeated): plan with each, keep the fastest plan that fits, record every mode tried
(``solver.offload_modes``). The same rule as a choice of recompute module lists
(``planner.core.recompute.CHOICE_SEP``) and of device orders (``planner.planning.fleet``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from planner.core.errors import InfeasibleError

__all__ = ["plan_offload_choices"]


def plan_offload_choices(plan_one: Callable[[str], Any], modes: tuple[str, ...], objective: str) -> Any:
    """``plan_one(mode)`` for each offloading mode; the fastest plan by ``objective`` (the first
    mode on a tie). Raises the first mode's error when no mode plans."""
    tried, plans, first_error = [], [], None
    for mode in modes:
        try:
            p = plan_one(mode)
        except InfeasibleError as exc:  # BudgetExhausted too: this mode did not plan
            first_error = first_error or exc
            tried.append({"offload": mode, "status": "infeasible", "reason": str(exc)})
            continue
        step = p.predicted.steady_step_time_s if objective == "steady" else p.predicted.step_time_s
        tried.append({"offload": mode, "status": "planned", "step_time_s": step})
        plans.append((step, len(plans), p))
    if not plans:
        raise first_error  # type: ignore[misc]
    best = min(plans, key=lambda t: (t[0], t[1]))[2]
    best.solver = replace(best.solver, other={**best.solver.other, "offload_modes": tried})
    return best
