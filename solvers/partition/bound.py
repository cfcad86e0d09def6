"""A lower bound on the step time of *every* partition (one stage per rank), any schedule.

``solvers.schedule.search.lower_bound`` bounds the step of one partition. A tie between the planner's
partition and a baseline only means something when no partition could do clearly
better, so this module takes the minimum of that bound over all contiguous
partitions into S = pp stages, for a given cost table, microbatch count and memory
limit (bytes per GPU):

    min over partitions P of max over stages s of term(s, start_s, end_s)

Each part of ``step_lower_bound`` that the benchmark shapes need is a function of one
stage's range and its index alone, once the pieces that depend on the other stages
are replaced by their smallest possible value over any split of the layers before
(``head``) or after (``rest``) the stage:

- ``head(s, a)``: the cheapest forward chain into stage s over layers [0, a) split into
  s stages, each stage at ``min(F, fused)`` plus the cheapest P2P hop (min-sum DP);
- ``rest(s, b)``: the cheapest round trip through layers [b, N) split into S - s - 1
  stages, ``min(F, fused) + min(I, fused)`` each plus two hops between them (min-sum DP);
- with those, the stage's busiest-rank term (its work less what fused pairs can save,
  no pair before its first input-gradient), its round trip, and its memory-limited
  throughput (``floor(budget / act)`` microbatches in flight, budget = limit - the
  stage's static bytes) are the formulas of ``solvers.schedule.search.lower_bound`` (the W tail is
  bounded below by the stage's own W).

Each term is at most the corresponding part of ``step_lower_bound`` for any partition
that contains the range, so the minimax over partitions (``minmax_partition``) is at
most the best partition's bound, hence at most every plan's step time. A stage whose
static bytes plus one microbatch of activations exceed the limit is infeasible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.core.costs import CostTable
from planner.core.errors import InfeasibleError
from planner.core.placement import Bounds
from solvers.partition.overlap_cost import OverlapRangeCost
from solvers.partition.ranges import minmax_partition, prefix_sums, range_table

__all__ = ["PartitionBound", "partition_lower_bound"]

_INF = math.inf


@dataclass(frozen=True)
class PartitionBound:
    """The bound and the partition attaining it."""

    step_s: float
    """No one-stage-per-rank partition of this table runs a step faster (seconds)."""
    bounds: Bounds
    """The partition with the smallest per-partition bound (not necessarily the fastest plan)."""


def _cheapest_chain(n: int, stages: int, cost, hop: float, *, suffix: bool) -> list[list[float]]:
    """out[k][x]: min over splits of [0, x) (or [x, n) with ``suffix``) into k non-empty
    stages of sum(cost(range) + hop)."""
    out = [[_INF] * (n + 1) for _ in range(stages + 1)]
    if suffix:
        out[0][n] = 0.0
        for k in range(1, stages + 1):
            for x in range(n - 1, -1, -1):
                out[k][x] = min((cost(x, y) + hop + out[k - 1][y] for y in range(x + 1, n + 1)
                                 if out[k - 1][y] < _INF), default=_INF)
        return out
    out[0][0] = 0.0
    for k in range(1, stages + 1):
        for x in range(1, n + 1):
            out[k][x] = min((out[k - 1][y] + cost(y, x) + hop for y in range(x)
                             if out[k - 1][y] < _INF), default=_INF)
    return out


def partition_lower_bound(table: CostTable, *, pp: int, microbatches: int,
                          memory_limit_bytes: int | None = None) -> PartitionBound:
    """The bound of the module docstring; ``InfeasibleError`` when no partition fits one
    microbatch per stage within ``memory_limit_bytes``."""
    n, S, M = table.num_layers, pp, microbatches
    rc = OverlapRangeCost(table)
    layers = table.layers
    act, static = prefix_sums([lc.act_bytes for lc in layers]), prefix_sums([lc.static_bytes for lc in layers])
    hop = min(table.p2p.time(lc.out_bytes) for lc in layers) if S > 1 else 0.0

    def fmin(a: int, b: int) -> float:
        return min(rc.forward(a, b), rc.overlapped(a, b))

    def imin(a: int, b: int) -> float:
        return min(rc.backward(a, b), rc.overlapped(a, b))

    head = _cheapest_chain(n, S, fmin, hop, suffix=False)
    rest = _cheapest_chain(n, S, lambda a, b: fmin(a, b) + imin(a, b), 2 * hop, suffix=True)
    rest = [row if k == 0 else [x - 2 * hop for x in row] for k, row in enumerate(rest)]  # none after the last

    def term(s: int, a: int, b: int) -> float:
        h, after = head[s][a], rest[S - s - 1][b]
        if h == _INF or after == _INF:
            return _INF
        f, i, w = rc.forward(a, b), rc.backward(a, b), rc.weight(a, b)
        sav = max(0.0, f + i - rc.overlapped(a, b))
        trip = fmin(a, b) + imin(a, b) + (2 * hop if s + 1 < S else 0.0) + after
        window = trip - imin(a, b)  # first input-gradient of the stage, from its start
        rho = min(1.0, sav / f) if f > 0 else 0.0
        best = max(h + M * (f + i + w - sav) + window * rho, h + trip + w)
        if memory_limit_bytes is not None:
            budget, a_bytes = memory_limit_bytes - (static[b] - static[a]), act[b] - act[a]
            if a_bytes > 0:
                k = budget // a_bytes
                if k < 1:
                    return _INF
                best = max(best, h + math.ceil(M / k) * trip + w)
        return best

    terms = range_table(n, S, term)  # an infinite term (a stage over memory) is never chosen
    try:
        bounds = minmax_partition(n, S, term, table=terms)
    except InfeasibleError:
        raise InfeasibleError("no partition holds one microbatch per stage within the memory limit") from None
    return PartitionBound(step_s=max(terms[s][a][b] for s, (a, b) in enumerate(bounds)), bounds=bounds)
