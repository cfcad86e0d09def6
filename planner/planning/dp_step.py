"""Write the one prediction (``planner.planning.prediction``) into a plan.

The simulated step (``predicted.step_time_s``) is the pipeline schedule's makespan: the
time from the first forward to the last backward of one step, which ``ppplan simulate``
and ``ppplan replay`` recompute from the schedule and compare with. The data-parallel
gradient reduce-scatter / parameter all-gather (or FSDP's per-microbatch gathers) and the
Adam step happen around that schedule, so they are added beside it:

- ``dp_exposed_s``: the part of the data-parallel traffic not hidden behind the busiest
  rank's compute of one microbatch (Megatron's overlapped grad reduce / param gather);
- ``optimizer_s``: the Adam step (memory bound, never hidden);
- ``optimizer_step_time_s``: ``step_time_s + dp_exposed_s + optimizer_s``, the whole
  optimizer step; the degree search compares configurations on it;
- ``mfu`` and ``tokens_per_s_per_gpu``: over the whole optimizer step ([Note: one step]
  in ``planner.planning.prediction``).
"""

from __future__ import annotations

from dataclasses import replace

from planner.core.cluster import ClusterSpec
from planner.core.model import ModelSpec
from planner.core.plan import Plan
from planner.core.stage_costs import StageCosts
from planner.planning.prediction import Prediction, predict_optimizer_step

__all__ = ["add_dp_step", "plan_prediction", "optimizer_step_time", "busiest_microbatch_compute",
           "site_link_busy"]


def busiest_microbatch_compute(costs: StageCosts) -> float:
    """The busiest rank's compute of one microbatch (F + I + W of its stages): what the
    data-parallel traffic hides behind, for a plan and for the degree screen alike."""
    per_rank = [0.0] * costs.num_ranks
    for s, r in enumerate(costs.ranks):
        per_rank[r] += costs.f[s] + costs.i[s] + costs.w[s]
    return max(per_rank, default=0.0)


def site_link_busy(costs: StageCosts, microbatches: int) -> float:
    """Seconds the inter-site link is busy in one direction per step when pp crosses sites:
    every microbatch's activations (one way) and gradients (the other) over each boundary
    between sites, at that boundary's share of the link. The simulator charges each send as a
    delay (``StageCosts.p2p_time``) and does not queue sends on the link, so the step can be
    no shorter than this (``predict_optimizer_step``'s ``link_busy_s``)."""
    hop = costs.site_hop
    if hop is None:
        return 0.0
    crossing = [b for b in range(costs.num_stages) if hop.crosses(b, costs.ranks)]
    return microbatches * sum(costs.out_bytes[b] for b in crossing) / hop.link.bandwidth


def plan_prediction(plan: Plan, model: ModelSpec, cluster: ClusterSpec) -> Prediction:
    """The prediction of ``plan``'s simulated schedule (its ``step_time_s`` and per-rank peaks)."""
    pred, costs = plan.predicted, plan.parsed_stage_costs()
    return predict_optimizer_step(model, cluster, step_time_s=pred.step_time_s,
                                  peak_memory_bytes=pred.peak_memory_bytes,
                                  microbatch_compute_s=busiest_microbatch_compute(costs),
                                  microbatches=plan.num_microbatches,
                                  link_busy_s=site_link_busy(costs, plan.num_microbatches))


def add_dp_step(plan: Plan, model: ModelSpec, cluster: ClusterSpec) -> Plan:
    """``plan`` with the one prediction in its ``predicted`` section (a new ``Predicted``
    set on ``plan``, which is returned): ``dp_exposed_s``, ``optimizer_s``, ``optimizer_step_time_s``, ``mfu`` and
    ``tokens_per_s_per_gpu`` beside the simulated ``step_time_s`` and peaks."""
    plan.predicted = replace(plan.predicted, **plan_prediction(plan, model, cluster).as_fields())
    return plan


def optimizer_step_time(plan: Plan) -> float:
    """The whole optimizer step of ``plan``: ``optimizer_step_time_s`` where recorded, else
    the schedule's step (plans written before it existed)."""
    pred = plan.predicted
    return pred.step_time_s if pred.optimizer_step_time_s is None else pred.optimizer_step_time_s
