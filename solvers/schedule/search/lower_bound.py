"""A valid lower bound on the step time for given stage costs and activation budgets.

The step time is the simulator's makespan (``planner.core.simulate``): each rank runs
one action at a time, every action waits for its ``predecessors`` (plus P2P time across
ranks), F allocates ``act_bytes`` at its start, I and W free it at their ends. The bound
is the largest of three necessary conditions on every schedule (``bound_parts``):

1. ``rank_work``: the busiest rank's work less what fused pairs can save, shifted by its
   earliest start (``_rank_work``);
2. ``round_trip``: one microbatch's round trip, the memory-free case of 3;
3. ``memory``: memory-limited throughput, at most ``budget / act`` microbatches in flight
   per stage, each for at least a round trip.

Chains use each task's cheapest form (``_cheapest``, ``_cheapest_backward``), so fused and
full-backward schedules are covered; all three hold for any order, placement and
deadline, hence for the optimum.
"""

from __future__ import annotations

import math
from dataclasses import replace

from planner.core.stage_costs import StageCosts

__all__ = ["step_lower_bound", "LowerBound", "bound_parts"]


class LowerBound(dict):
    """Named parts of the bound (``rank_work``, ``round_trip``, ``memory``)."""


def _cheapest_backward(costs: StageCosts) -> StageCosts:
    """Costs whose I and W are no dearer than a full backward.

    A measured full backward B may cost less than I + W (``planner.core.costs`` [Note: full
    backward]): I reads as ``min(I, B)`` and W as ``min(W, B - that)``, so each stage's
    backward work is at most the cheaper of its two forms, and each fused pair keeps its
    saving.
    """
    if not costs.b:
        return costs
    i = tuple(min(x, b) for x, b in zip(costs.i, costs.b))
    w = tuple(min(x, b - y) for x, y, b in zip(costs.w, i, costs.b))
    fused = {(a, s): t - (costs.i[s] - i[s]) for (a, s), t in costs.fused.items()}
    return replace(costs, i=i, w=w, b=(), fused=fused)


def _cheapest(costs: StageCosts) -> tuple[list[float], list[float]]:
    """Per stage the cheapest F and I: alone or inside any fused pair
    (``min(F_s, fused(s, b))``), so chains of fused schedules are bounded too."""
    S = costs.num_stages
    fmin, imin = list(costs.f), list(costs.i)
    for (a, b), t in costs.fused.items():
        if 0 <= a < S and 0 <= b < S:
            fmin[a] = min(fmin[a], t)
            imin[b] = min(imin[b], t)
    return fmin, imin


def _hop(costs: StageCosts, t: int) -> float:
    """P2P time across boundary t (stage t -> t+1), 0 when both stages share a rank."""
    return costs.p2p_time(t) if costs.ranks[t] != costs.ranks[t + 1] else 0.0


def _rank_work(costs: StageCosts, m: int, head: list[float], first_i: list[float]) -> float:
    """Bound 1: the busiest rank, shifted by its earliest start.

    Rank r runs M x (F + I + W) of each of its stages. Fusing an F with an I of another
    microbatch saves ``sav(a, b) = F_a + I_b - fused(a, b)``; each F and each I is in at
    most one pair, so the saving is at most M x min(sum_a max_b sav(a, b), sum_b max_a
    sav(a, b)). No task of rank r can start before ``head_r``, the shortest forward chain
    to any of its stages (every task of stage s needs F(s, m), which needs F(0..s-1, m)).
    So T >= head_r + work_r - saving_r.
    """
    best = 0.0
    for r in range(costs.num_ranks):
        mine = [s for s in range(costs.num_stages) if costs.ranks[s] == r]
        if not mine:
            continue
        work = sum(m * (costs.f[s] + costs.i[s] + costs.w[s]) for s in mine)
        sav = {(a, b): max(0.0, costs.f[a] + costs.i[b] - costs.fused_time(a, b))
               for a in mine for b in mine}
        sav_f = {a: max(sav[(a, b)] for b in mine) for a in mine}
        by_f = sum(sav_f.values())
        by_i = sum(max(sav[(a, b)] for a in mine) for b in mine)
        start = min(head[s] for s in mine)
        best = max(best, start + work - m * min(by_f, by_i))
        window = min(first_i[s] for s in mine) - start
        rho = min((min(1.0, sav_f[a] / costs.f[a]) for a in mine if costs.f[a] > 0), default=0.0)
        best = max(best, start + work - m * by_f + max(0.0, window) * rho)
    return best


def bound_parts(costs: StageCosts, microbatches: int, *,
                activation_limit: list[int | None] | None = None) -> LowerBound:
    """The three bounds of the module docstring, by name.

    Bound 3: let k_s = floor(budget_r / act_s) for stage s on rank r: a microbatch holds
    at least ``act_s`` from the start of F(s, m) to the end of I(s, m), so at most k_s are
    in that window at any time. Sort the starts of F(s, .) as a_1 <= ... <= a_M. When the
    (j+k)-th starts, one of the k microbatches started at a_j..a_{j+k-1} has already ended
    its I(s, .), which took at least the round trip R_s = sum_{t >= s} (F_t + I_t) + 2 x
    P2P of each rank crossing after s since its own F(s) start >= a_j; so a_{j+k} >= a_j +
    R_s, and the last F(s) starts at >= head_s + (ceil(M / k_s) - 1) R_s. Its I(s) ends a
    round trip later, and the gradient still has to pass every W: tail_s = max over t <= s
    of the I chain s-1..t (with P2P) plus W_t. So T >= head_s + ceil(M / k_s) R_s + tail_s.
    With no budget, k_s = M gives the single round trip (bound 2).
    """
    costs = _cheapest_backward(costs)
    S, m = costs.num_stages, microbatches
    fmin, imin = _cheapest(costs)
    head = [0.0] * S
    for s in range(1, S):
        head[s] = head[s - 1] + fmin[s - 1] + _hop(costs, s - 1)
    trip = [0.0] * (S + 1)  # trip[s] = R_s
    for s in range(S - 1, -1, -1):
        trip[s] = trip[s + 1] + fmin[s] + imin[s] + (2 * _hop(costs, s) if s + 1 < S else 0.0)
    tail = [0.0] * S
    for s in range(S):
        chain, best = 0.0, costs.w[s]
        for t in range(s - 1, -1, -1):
            chain += _hop(costs, t) + imin[t]
            best = max(best, chain + costs.w[t])
        tail[s] = best
    single = max(head[s] + trip[s] + tail[s] for s in range(S))
    memory = single
    if activation_limit is not None:
        for s in range(S):
            limit, act = activation_limit[costs.ranks[s]], costs.act_bytes[s]
            if limit is None or act <= 0:
                continue
            k = max(1, limit // act)
            memory = max(memory, head[s] + math.ceil(m / k) * trip[s] + tail[s])
    first_i = [head[s] + trip[s] - imin[s] for s in range(S)]
    return LowerBound(rank_work=_rank_work(costs, m, head, first_i), round_trip=single, memory=memory)


def step_lower_bound(costs: StageCosts, microbatches: int, *,
                     activation_limit: list[int | None] | None = None) -> float:
    """Largest of the bounds in the module docstring (seconds); valid for every schedule."""
    return max(bound_parts(costs, microbatches, activation_limit=activation_limit).values())
