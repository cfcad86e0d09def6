"""Data-parallel traffic and the optimizer step added to a plan's predictions.

The simulated step (``predicted.step_time_s``) is the pipeline schedule's makespan: the
time from the first forward to the last backward of one step, which ``ppplan simulate``
and ``ppplan replay`` recompute from the schedule and compare with. The data-parallel
gradient reduce-scatter / parameter all-gather (or FSDP's per-microbatch gathers) and the
Adam step happen around that schedule, so they are added beside it
(``profiler.cost_model.optimizer``, the same terms as the closed-form estimate):

- ``dp_exposed_s``: the part of the data-parallel traffic not hidden behind the busiest
  rank's compute of one microbatch (Megatron's overlapped grad reduce / param gather);
- ``optimizer_s``: the Adam step (memory bound, never hidden);
- ``optimizer_step_time_s``: ``step_time_s + dp_exposed_s + optimizer_s``, the whole
  optimizer step; the degree search compares configurations on it.
"""

from __future__ import annotations

from planner.core.cluster import ClusterSpec
from planner.core.model import ModelSpec
from planner.core.plan import Plan
from planner.planning.estimate import dp_cost

__all__ = ["add_dp_step", "optimizer_step_time"]


def add_dp_step(plan: Plan, model: ModelSpec, cluster: ClusterSpec) -> Plan:
    """``plan`` with ``dp_exposed_s``, ``optimizer_s`` and ``optimizer_step_time_s`` in its
    predictions (changed in place and returned)."""
    sc = plan.stage_costs
    per_rank: dict[int, float] = {}
    for st in plan.stages:
        s = st["stage"]
        per_rank[st["rank"]] = per_rank.get(st["rank"], 0.0) + sc["f"][s] + sc["i"][s] + sc["w"][s]
    cost = dp_cost(model, cluster, microbatch_compute_s=max(per_rank.values(), default=0.0),
                   microbatches=plan.num_microbatches)
    pred = plan.predicted
    pred["dp_exposed_s"] = cost.exposed_s
    pred["optimizer_s"] = cost.optimizer_s
    pred["optimizer_step_time_s"] = pred["step_time_s"] + cost.exposed_s + cost.optimizer_s
    return plan


def optimizer_step_time(plan: Plan) -> float:
    """The whole optimizer step of ``plan``: ``optimizer_step_time_s`` where recorded, else
    the schedule's step (plans written before it existed)."""
    return plan.predicted.get("optimizer_step_time_s", plan.predicted["step_time_s"])
