"""A valid lower bound on the step time for given stage costs.

Every rank must run all of its work: sum over its stages of M x (F + I + W), where a
fused pair may replace F + I by its overlapped time, so per stage the cheapest way to
do one microbatch's F and I is min(F + I, fused(s, s)). No schedule can end before
the busiest rank has done that much. Additionally the first microbatch must travel
through every stage forward and back before the last stage-0 input-gradient can run:
sum_s (F_s + I_s) (+ P2P between ranks) is a second bound; the maximum is returned.
Memory limits only lengthen schedules, so both stay valid under them.
"""

from __future__ import annotations

from planner.core.stage_costs import StageCosts

__all__ = ["step_lower_bound"]


def step_lower_bound(costs: StageCosts, microbatches: int) -> float:
    """max(busiest rank's total work, one microbatch's forward-backward round trip)."""
    work = [0.0] * costs.num_ranks
    for s in range(costs.num_stages):
        fi = min(costs.f[s] + costs.i[s], costs.fused.get((s, s), costs.f[s] + costs.i[s]))
        work[costs.ranks[s]] += microbatches * (fi + costs.w[s])
    trip = sum(costs.f) + sum(costs.i)
    for s in range(costs.num_stages - 1):
        if costs.ranks[s] != costs.ranks[s + 1]:
            trip += 2 * costs.p2p_time(s)
    return max(max(work), trip)
