"""Simulate or validate a saved plan with the stage costs embedded in it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.core.plan import Plan, load_plan_file
from planner.core.simulate import simulate
from planner.core.validate import render_violation, validate

__all__ = ["simulate_plan", "validate_plan", "plan_mfu", "require_valid"]


def plan_mfu(plan: Plan, step_time: float) -> float:
    """Model FLOPs utilisation of ``plan`` at ``step_time`` (PaLM convention)."""
    peak = plan.cluster.peak_flops
    gpus = plan.cluster.num_gpus
    flops = sum(plan.stage_costs.get("flops", [])) * plan.num_microbatches * plan.parallel.get("dp", 1)
    if not peak or not gpus or step_time <= 0:
        return 0.0
    return flops / (step_time * gpus * peak)


def simulate_plan(path: str | Path | Plan) -> dict[str, Any]:
    """Simulation summary of a plan file (or ``Plan``)."""
    plan = require_valid(path, "simulated")
    sim = simulate(plan.parsed_schedule(), plan.parsed_stage_costs())
    return {"step_time_s": sim.step_time, "bubble_fraction": sim.bubble_fraction,
            "mfu": plan_mfu(plan, sim.step_time), "busy_s": sim.busy,
            "bubble_s": sim.bubble, "peak_memory_bytes": sim.peak_memory_bytes,
            "memory_limit_bytes": plan.memory_limit_bytes,
            **({"rank_memory_limit_bytes": plan.memory_limits} if isinstance(plan.memory_limits, list) else {}),
            "critical_path": sim.critical_path_text(),
            "predicted_step_time_s": plan.predicted.step_time_s,
            **{name: plan.baselines[name].to_dict() for name in _RECORDED if name in plan.baselines}}


_RECORDED = ("user_layout", "ppplan")
"""Baselines of ``--layout`` (whole plans of another partition, ``planner.planning.user_layout``) that
the report carries as recorded: the plan holds only its own partition's stage costs to re-simulate."""


def require_valid(path: str | Path | Plan, doing: str) -> Plan:
    """The plan, or an ``InputError`` with ``ppplan validate``'s first finding: a
    verb that runs the schedule (simulate, replan, replay) gives the same verdict as validate."""
    plan = path if isinstance(path, Plan) else load_plan_file(path)
    problems = validate_plan(plan)
    if problems:
        raise InputError("plan.schedule", f"invalid, so not {doing}: {problems[0].splitlines()[0]}",
                         "see ppplan validate PLAN")
    return plan


def validate_plan(path: str | Path | Plan) -> list[str]:
    """Rendered violations of a plan file; empty when valid."""
    plan = path if isinstance(path, Plan) else load_plan_file(path)
    sched = plan.parsed_schedule()
    found = validate(sched, plan.parsed_stage_costs(), num_microbatches=plan.num_microbatches,
                     memory_limit_bytes=plan.memory_limits)
    return [render_violation(v, sched) for v in found]
