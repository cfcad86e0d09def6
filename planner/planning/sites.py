"""Which dimension crosses the slow link between sites, and the bandwidth at which that flips.

A job over ``cluster.sites`` (``planner.core.sites``) sends either one pipeline boundary's
activations and gradients over the inter-site link (``pp``: every microbatch, each send
paying the latency, ``StageCosts.p2p_time``) or the data-parallel gradient reduction (``dp``:
once per step, the whole gradient, hierarchically, partly hidden behind the last
microbatch's backward: ``profiler.cost_model.comm.site_ring_seconds``). CrossPipe (ATC'25)
finds the same crossover across data centres. The planner plans each crossing the degrees
allow and keeps the shorter optimizer step; ``crossover_gbps`` bisects over the bandwidth
with both plans' schedules fixed, re-simulated (pp) and re-priced (dp) by the same rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from planner.core.cluster import ClusterSpec
from planner.core.model import ModelSpec
from planner.core.plan import Plan
from planner.core.simulate import simulate
from planner.core.sites import site_hop
from planner.planning.dp_step import busiest_microbatch_compute, optimizer_step_time, site_link_busy
from planner.planning.prediction import predict_optimizer_step

__all__ = ["plan_sites", "crossover_gbps", "with_crossing", "step_at", "GBPS_RANGE"]

GBPS_RANGE = (0.1, 10000.0)
"""Bandwidths (Gb/s) the crossover is searched in; outside it the record says None."""
_SCAN = 40
"""Steps of the scan over ``GBPS_RANGE``: 8 per decade."""
_BISECTIONS = 20
"""Halvings of one scan step (a factor 10^(1/8)): far below the 3 digits kept."""


def with_crossing(cluster: ClusterSpec, crossing: str, gbps: float | None = None) -> ClusterSpec:
    """``cluster`` with ``crossing`` over its sites (and the link at ``gbps`` when given)."""
    sites = replace(cluster.sites, crossing=crossing)
    if gbps is not None:
        sites = replace(sites, inter_site_gbps=gbps)
    return replace(cluster, sites=sites)


def step_at(plan: Plan, model: ModelSpec, cluster: ClusterSpec, gbps: float) -> float:
    """Optimizer step of ``plan`` (made with ``cluster``'s crossing) with the link at ``gbps``:
    its schedule re-simulated with the hop at that bandwidth, and the DP step re-priced."""
    at = with_crossing(cluster, cluster.sites.crossing, gbps)
    costs = plan.parsed_stage_costs()
    costs = replace(costs, site_hop=site_hop(at.sites, costs.p2p, num_gpus=at.num_gpus, pp=at.parallel.pp))
    sim = simulate(plan.parsed_schedule(), costs)
    m = plan.num_microbatches
    return predict_optimizer_step(model, at, step_time_s=sim.step_time, peak_memory_bytes=sim.peak_memory_bytes,
                                  microbatch_compute_s=busiest_microbatch_compute(costs), microbatches=m,
                                  link_busy_s=site_link_busy(costs, m)).optimizer_step_time_s


def crossover_gbps(plans: dict[str, tuple[Plan, ClusterSpec]], model: ModelSpec, gbps: float) -> float | None:
    """Bandwidth (Gb/s, 3 significant digits) at which the faster of the pp and dp plans flips,
    nearest ``gbps`` (the planned link) in log space: a scan of ``GBPS_RANGE`` then bisection
    in the bracketing step. The winner can flip twice (dp at a very slow link, whose bytes a
    pipeline boundary carries every microbatch; pp in between; dp again where the gradient
    hides behind compute but each pipeline send still pays the latency). None with one
    crossing, or when the same one wins everywhere in the range."""
    if len(plans) < 2:
        return None

    def dp_leads(log_g: float) -> bool:
        g = math.exp(log_g)
        return step_at(plans["pp"][0], model, plans["pp"][1], g) > step_at(plans["dp"][0], model, plans["dp"][1], g)

    lo, hi = math.log(GBPS_RANGE[0]), math.log(GBPS_RANGE[1])
    grid = [lo + (hi - lo) * k / _SCAN for k in range(_SCAN + 1)]
    leads = [dp_leads(x) for x in grid]
    flips = [k for k in range(_SCAN) if leads[k] != leads[k + 1]]
    if not flips:
        return None
    k = min(flips, key=lambda j: (abs((grid[j] + grid[j + 1]) / 2 - math.log(gbps)), j))
    a, b, at_a = grid[k], grid[k + 1], leads[k]
    for _ in range(_BISECTIONS):
        mid = (a + b) / 2
        a, b = (mid, b) if dp_leads(mid) == at_a else (a, mid)
    return float(f"{math.exp((a + b) / 2):.3g}")


def plan_sites(model: ModelSpec, cluster: ClusterSpec, plan_with: Callable[[ClusterSpec], Plan]) -> Plan:
    """Plan each crossing ``cluster``'s degrees allow (``plan_with(cluster with that crossing)``)
    and return the one with the shorter optimizer step (pp on a tie), its ``sites`` recorded."""
    p = cluster.parallel
    allowed = cluster.sites.check_degrees(num_gpus=cluster.num_gpus, pp=p.pp, dp=p.dp, tp=p.tp, cp=p.cp,
                                          ep=p.ep, etp=p.etp)
    plans = {c: (plan_with(with_crossing(cluster, c)), with_crossing(cluster, c)) for c in allowed}
    steps = {c: optimizer_step_time(pl) for c, (pl, _) in plans.items()}
    crossing = min(steps, key=lambda c: (steps[c], c != "pp"))
    best = plans[crossing][0]
    auto = plans if cluster.sites.crossing == "auto" else {}
    best.extra["sites"] = cluster.sites.record(crossing, crossover_gbps(auto, model, cluster.sites.inter_site_gbps),
                                               steps)
    return best
