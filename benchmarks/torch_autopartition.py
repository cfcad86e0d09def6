"""The auto-partitioner proposed for torch.distributed.pipelining, re-derived for a side-by-side run.

Source: pytorch PR #179212 (from torchtitan PR #2113), file
``torchtitan/experiments/autopartition/infra/_partition.py`` at torchtitan commit c0151b15
(``partition_model_layers``, ``optimize_partition_model_layers``). Re-written from its description,
not copied, and kept out of the package. What it does:

1. a contiguous DP over layers that minimises the largest per-stage F+B time over pp x vpp stages
   (stage s on rank s % pp);
2. a breadth-first search around the steady-phase critical stage c (c > 0): move the first layer
   of c to c - 1 and re-balance the prefix ending at it over c stages with the same DP, or move the
   last layer of c to c + 1 and re-balance the prefix before it over c + 1 stages; each candidate is
   scored by a schedule simulator and searched on only while its critical stage does not move right.

It has no memory model and no overlap model; the caller's ``score`` supplies the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

Parts = list[list[int]]
"""Layer indices per stage, contiguous and in order."""


def balanced_dp(costs: Sequence[float], stages: int, first: int = 0) -> Parts:
    """Contiguous split of ``costs`` into ``stages`` non-empty parts minimising the largest sum."""
    n = len(costs)
    if not 1 <= stages <= n:
        raise ValueError(f"cannot split {n} layers into {stages} non-empty stages")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    best = [[math.inf] * (stages + 1) for _ in range(n + 1)]
    cut = [[-1] * (stages + 1) for _ in range(n + 1)]
    best[0][0] = 0.0
    for end in range(1, n + 1):
        for parts in range(1, min(end, stages) + 1):
            for start in range(parts - 1, end):
                value = max(best[start][parts - 1], prefix[end] - prefix[start])
                if value < best[end][parts]:
                    best[end][parts], cut[end][parts] = value, start
    out: Parts = []
    end, parts = n, stages
    while parts:
        start = cut[end][parts]
        out.append(list(range(first + start, first + end)))
        end, parts = start, parts - 1
    return out[::-1]


def _left(parts: Parts, c: int, costs: Sequence[float]) -> Parts | None:
    """First layer of stage c to stage c - 1, the prefix up to it re-balanced over c stages."""
    if c <= 0 or c >= len(parts) or len(parts[c]) <= 1:
        return None
    moved = parts[c][0]
    return balanced_dp(costs[:moved + 1], c) + [parts[c][1:]] + [list(p) for p in parts[c + 1:]]


def _right(parts: Parts, c: int, costs: Sequence[float]) -> Parts | None:
    """Last layer of stage c to stage c + 1, the prefix before it re-balanced over c + 1 stages."""
    if c < 0 or c >= len(parts) - 1 or len(parts[c]) <= 1:
        return None
    moved = parts[c][-1]
    if moved < c + 1:
        return None
    return balanced_dp(costs[:moved], c + 1) + [[moved] + parts[c + 1]] + [list(p) for p in parts[c + 2:]]


def auto_partition(costs: Sequence[float], stages: int,
                   score: Callable[[Parts], tuple[float, int]]) -> tuple[Parts, float, int]:
    """The peer's search: (best parts, its score, partitions scored). ``score`` maps parts to
    (step time, steady-phase critical stage)."""
    base = balanced_dp(costs, stages)
    t, crit = score(base)
    best, best_t, scored = base, t, 1
    seen = {tuple(map(tuple, base))}
    queue = [(base, crit)]
    while queue:
        parts, c = queue.pop(0)
        if c == 0:
            continue
        for cand in (_left(parts, c, costs), _right(parts, c, costs)):
            if cand is None or tuple(map(tuple, cand)) in seen:
                continue
            seen.add(tuple(map(tuple, cand)))
            t, crit = score(cand)
            scored += 1
            if t < best_t:
                best, best_t = cand, t
            if crit <= c:
                queue.append((cand, crit))
    return best, best_t, scored


def to_bounds(parts: Parts) -> list[tuple[int, int]]:
    """Parts as ppplan's (first layer, end layer) bounds per stage."""
    return [(p[0], p[-1] + 1) for p in parts]
