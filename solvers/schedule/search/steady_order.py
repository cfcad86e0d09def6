"""Orders built for the steady-state period: the last W tasks of a step fill the wait for the next.

[Note: steady tail] When steps repeat without a global barrier ([Note: steady state] in
``planner.core.steady``), rank r waits between its last input-gradient of step k and
its first forward of step k + 1 for that gradient's way back to rank 0, rank 0's last
W and the next step's first forward's way out to rank r:
``gap_r = sum_{s<r} (I_s + F_s + 2 P2P_s) + W_0``. Only W tasks of step k can fill it,
so rank r holds back ``tail_r = floor(gap_r / W_r)`` of them (all M at most). The last
rank, whose wait is longest, cannot fill it (it has M W tasks in all), so the period is
at least its work plus ``gap_{p-1} - M W_{p-1}``: on the Zero Bubble paper's setting
(p 8, M 24, F/I/W 18.52/18.09/9.34 ms, P2P 0.6 ms) 1102.80 + 49.85 ms, a bubble of
0.0433, what the paper reports for ZB-2p without a global barrier (Qi et al., ICLR
2024, "Zero Bubble Pipeline Parallelism", table 4 and sec. 4, post-validation).

Rank r's order (one stage per rank, split backward):

- ``warm_r`` forwards, enough to cover the first input-gradient's round trip from rank r
  to the last rank and back (ZB-H2's 2(p - r) - 1 on the paper's setting), within
  the rank's activation budget and no more than the rank before runs (a later rank
  waiting for a forward its predecessor runs only after an input-gradient from it
  would deadlock);
- for each microbatch j: I(j), then its share of the other ``M - tail_r`` W tasks (spread
  evenly over the first M - 1 slots, so none lands between the last two I tasks, where it
  would delay the last gradient on its way back), then the next forward, running held W
  tasks first when the forward would exceed the activation budget;
- the ``tail_r`` held W tasks.

``steady_orders`` yields this order for ``warm`` and ``tail`` moved by -1, 0 and +1
around those values; the search keeps the one with the shortest simulated period.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from planner.core.schedule import Action, ActionKind, Schedule
from planner.core.stage_costs import StageCosts

__all__ = ["base_counts", "steady_order", "steady_orders", "steady_lower_bound"]


def _one_stage_per_rank(costs: StageCosts) -> bool:
    return costs.num_stages == costs.num_ranks and list(costs.ranks) == list(range(costs.num_ranks))


def _hops(costs: StageCosts) -> list[float]:
    return [costs.f[s] + costs.i[s] + 2 * costs.p2p_time(s) for s in range(costs.num_stages)]


def steady_lower_bound(costs: StageCosts, m: int) -> float:
    """No order's period is shorter: the busiest rank's work, and with one stage per rank
    every rank's work plus the part of its wait ``gap_r`` its M W tasks cannot fill
    ([Note: steady tail]; the wait is a chain of dependencies whatever the order)."""
    work = [0.0] * costs.num_ranks
    for s in range(costs.num_stages):
        work[costs.ranks[s]] += m * (costs.f[s] + min(costs.i[s] + costs.w[s], costs.b_time(s)))
    cheaper_b = any(costs.b_time(s) < costs.i[s] + costs.w[s] for s in range(costs.num_stages))
    if cheaper_b or not _one_stage_per_rank(costs):
        return max(work)  # the tail argument counts W tasks, which a cheaper full B may skip
    hop = _hops(costs)
    return max(work[r] + max(0.0, sum(hop[:r]) + costs.w[0] - m * costs.w[r]) for r in range(costs.num_ranks))


def base_counts(costs: StageCosts, m: int) -> tuple[list[int], list[int]]:
    """``(warm_r, tail_r)`` per rank ([Note: steady tail]) for one stage per rank."""
    p, hop = costs.num_stages, _hops(costs)
    warm = [min(m, math.ceil((sum(hop[r + 1:]) - costs.i[r] + costs.f[r]) / costs.f[r] - 1e-9))
            for r in range(p)]
    tail = [min(m, int((sum(hop[:r]) + costs.w[0]) / costs.w[r] + 1e-9)) for r in range(p)]
    return warm, tail


def steady_order(costs: StageCosts, m: int, *, warm: list[int], tail: list[int],
                 activation_limit: list[int] | None) -> Schedule | None:
    """The order of the module docstring; None when a forward can never fit the budget."""
    out: Schedule = {}
    cap = m
    for r in range(costs.num_stages):
        limit = None if activation_limit is None else activation_limit[r]
        if limit is not None:
            cap = min(cap, limit // costs.act_bytes[r])
        cap = max(1, min(cap, warm[r]))  # no more warm-up than the rank before: else a deadlock
        row = _rank_order(costs, r, m, cap, max(0, min(m, tail[r])), limit)
        if row is None:
            return None
        out[r] = row
    return out


def _rank_order(costs: StageCosts, s: int, m: int, warm: int, tail: int,
                limit: int | None) -> list[Action] | None:
    act, keep = costs.act_bytes[s], costs.act_w_bytes[s]
    row: list[Action] = []
    nf = ni = nw = 0
    held = 0

    def forward() -> bool:
        nonlocal nf, nw, held
        while limit is not None and held + act > limit:
            if nw >= ni:  # no W left to run: the forward never fits
                return False
            row.append(Action(s, ActionKind.W, nw))
            nw, held = nw + 1, held - keep
        row.append(Action(s, ActionKind.F, nf))
        nf, held = nf + 1, held + act
        return True

    for _ in range(warm):
        if not forward():
            return None
    middle = m - tail
    for j in range(m):
        row.append(Action(s, ActionKind.I, j))
        ni, held = ni + 1, held - (act - keep)
        due = middle if j >= m - 2 else min(middle, round((j + 1) * middle / max(1, m - 1)))
        while nw < min(due, j + 1):
            row.append(Action(s, ActionKind.W, nw))
            nw, held = nw + 1, held - keep
        if nf < m and not forward():
            return None
    row += [Action(s, ActionKind.W, k) for k in range(nw, m)]
    return row


def steady_orders(costs: StageCosts, m: int, activation_limit: list[int] | None) -> Iterator[tuple[str, Schedule]]:
    """(name, order) for ``warm`` and ``tail`` moved by -1, 0, +1 from ``base_counts``;
    nothing unless every rank holds one stage (the orders are drawn for that)."""
    if not _one_stage_per_rank(costs):
        return
    warm, tail = base_counts(costs, m)
    for dw in (0, -1, 1):
        for dt in (0, -1, 1):
            order = steady_order(costs, m, warm=[w + dw for w in warm], tail=[t + dt for t in tail],
                                 activation_limit=activation_limit)
            if order is not None:
                yield f"steady-tail({dw:+d},{dt:+d})", order
