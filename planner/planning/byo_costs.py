"""Bring your own costs: plan from a hand-written cost table, without a model config.

Users who measured per-stage forward, input-gradient and weight-gradient times, the
P2P link and per-microbatch activation bytes in their own runs write them as a cost
table (``planner/data/schemas/costs.schema.json``, one layer per stage is enough; see
``examples/costs/``) and run ``ppplan plan --profile FILE --pp N --microbatches M
[--memory-limit 4mb]``. The table is the whole model: layers are partitioned over the
pp x vpp stages (one each when counts match) and the schedule is chosen for those
costs exactly as for a model config.
"""

from __future__ import annotations

from pathlib import Path

from planner.core.costs_io import load_costs
from planner.core.errors import InputError
from planner.core.plan import Plan
from planner.core.targets import DEFAULT_TARGET
from planner.planning import PlanRequest, make_plan

__all__ = ["check_without_model", "plan_from_profile"]


def check_without_model(*, layout: str | None, devices: str | None, sites: dict, target: str) -> None:
    """Refuse, in one line, the options that need a MODEL when planning from a profile alone."""
    if layout is not None:
        raise InputError("--layout", "needs a MODEL (its layers are what the layout places)",
                         "pass the MODEL the profile was measured for")
    if devices is not None:
        raise InputError("--devices", "needs a MODEL (the fleet's costs come from the analytical model)",
                         "pass the MODEL, and leave out --profile")
    if sites:
        raise InputError("--sites", "needs a MODEL (its cluster is what the sites split)",
                         "pass the MODEL the profile was measured for")
    if target != DEFAULT_TARGET:
        raise InputError("--target", "planning from a profile without a MODEL supports only --target torch",
                         "pass the MODEL the profile was measured for")


def plan_from_profile(profile: str | Path, *, pp: int | None, vpp: int | None, microbatches: int | str | None,
                      memory_limit_bytes: int | None, memory_limit_microbatches: float | None,
                      schedule: str, partition: str, placement: str, seed: int, work: float,
                      time_limit: float | None, started: float | None, deadlines: dict,
                      objective: str = "makespan") -> Plan:
    """The plan for a cost table alone (see the module docstring)."""
    if pp is None:
        raise InputError("--pp", "is required with --profile and no MODEL", "pass --pp N")
    if microbatches is None or isinstance(microbatches, str):
        raise InputError("--microbatches", "a count is required with --profile and no MODEL",
                         "pass --microbatches M")
    table = load_costs(profile)
    stages = pp * (vpp or 1)
    if table.num_layers < stages:
        raise InputError("--profile", f"has {table.num_layers} layers, fewer than the {stages} stages",
                         "give at least one layer per stage or lower --pp/--vpp")
    req = PlanRequest(pp=pp, vpp=vpp or 1, microbatches=microbatches, microbatch_size=table.microbatch_size,
                      memory_limit_bytes=memory_limit_bytes, memory_limit_microbatches=memory_limit_microbatches,
                      deadlines=deadlines, schedule=schedule, partition=partition, placement=placement,
                      seed=seed, work_s=work, time_limit_s=time_limit, started_s=started, objective=objective,
                      model={"name": table.model or Path(profile).stem, "num_layers": table.num_layers,
                             "layer_types": [lc.type for lc in table.layers]},
                      cluster={"source": str(profile)}, parallel={"tp": 1, "ep": 1, "dp": 1})
    return make_plan(table, req)
