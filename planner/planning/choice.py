"""A choice the planner settles by planning every option and keeping the fastest plan that
fits: activation-offloading modes (``training.offload: [none, [expert_fc1, moe_act]]`` or
``--offload`` repeated, recorded as ``solver.offload_modes``) and device orders of a mixed
fleet (``--devices-order search``, ``solver.device_orders``: ``planner.planning.fleet``). One
rule for both, the same as a choice of recompute module lists
(``planner.core.recompute.CHOICE_SEP``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from planner.core.errors import InfeasibleError

__all__ = ["plan_fastest", "plan_offload_choices"]


def plan_fastest(plan_one: Callable[[str], Any], options: Iterable[str], objective: str, *, key: str,
                 record: str) -> Any:
    """``plan_one(option)`` for each option; the fastest plan by ``objective`` (the first option
    on a tie), with every option's outcome under ``solver.<record>`` (each named by ``key``).
    Raises the first option's error when none plans."""
    tried, plans, first_error = [], [], None
    for option in options:
        try:
            p = plan_one(option)
        except InfeasibleError as exc:  # BudgetExhausted too: this option did not plan
            first_error = first_error or exc
            tried.append({key: option, "status": "infeasible", "reason": str(exc)})
            continue
        step = p.predicted.steady_step_time_s if objective == "steady" else p.predicted.step_time_s
        tried.append({key: option, "status": "planned", "step_time_s": step})
        plans.append((step, len(plans), p))
    if not plans:
        raise first_error  # type: ignore[misc]
    best = min(plans, key=lambda t: (t[0], t[1]))[2]
    best.solver = replace(best.solver, other={**best.solver.other, record: tried})
    return best


def plan_offload_choices(plan_one: Callable[[str], Any], modes: tuple[str, ...], objective: str) -> Any:
    """``plan_one(mode)`` for each offloading mode; the fastest plan (``plan_fastest``)."""
    return plan_fastest(plan_one, modes, objective, key="offload", record="offload_modes")
