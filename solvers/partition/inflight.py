"""How many microbatches each stage keeps in flight under a given schedule order.

Derived from the schedule itself (count forwards not yet matched by a backward, in
rank order), so it holds for any generator; the partition solvers use it to bound
per-stage activation memory before costs are known.

The simulator's memory model (``planner.core.simulate``): a forward allocates the
stage's ``act_bytes``, an input-gradient frees all but ``act_w_bytes``, the
weight-gradient frees the rest, a full backward frees all. So at any moment a rank
holds, per stage ``c`` on it, ``full[c] x act[c] + w_only[c] x act_w[c]`` where
``full[c]`` counts microbatches past F but not yet past I/B and ``w_only[c]`` those
past I but not yet past W. The peak is reached right after some forward; recording
the count vector after every forward and keeping the Pareto-maximal ones gives
``memory_points``, from which the peak of ANY partition is
``max over points of sum_c full[c] act[c] + w_only[c] act_w[c]`` — exactly the
simulator's peak, for every choice of layer ranges, without simulating.
"""

from __future__ import annotations

from planner.core.schedule import ActionKind, Schedule
from planner.core.stage_costs import held_bytes, memory_order

__all__ = ["max_in_flight", "memory_points", "peak_activation_bytes", "MemoryPoint"]

MemoryPoint = tuple[tuple[int, int, int], ...]
"""One candidate peak on a rank: ``(stage, full, w_only)`` for each stage of the rank."""


def max_in_flight(schedule: Schedule, num_stages: int) -> list[int]:
    """Per stage, the largest number of microbatches between F and their I (or B)."""
    peak = [0] * num_stages
    for acts in schedule.values():
        held = [0] * num_stages
        for a in acts:
            for p in memory_order(a):
                if p.kind == ActionKind.F:
                    held[p.stage] += 1
                    peak[p.stage] = max(peak[p.stage], held[p.stage])
                elif p.kind in (ActionKind.I, ActionKind.B):
                    held[p.stage] -= 1
    return peak


def memory_points(schedule: Schedule) -> dict[int, list[MemoryPoint]]:
    """Rank -> Pareto-maximal ``(stage, full, w_only)`` count vectors seen after a forward."""
    out: dict[int, list[MemoryPoint]] = {}
    for rank, acts in schedule.items():
        stages = sorted({p.stage for a in acts for p in a.parts})
        col = {s: k for k, s in enumerate(stages)}
        full = [0] * len(stages)
        w_only = [0] * len(stages)
        seen: set[tuple[int, ...]] = set()
        for a in acts:
            for p in memory_order(a):
                k = col[p.stage]
                if p.kind == ActionKind.F:
                    full[k] += 1
                    seen.add(tuple(full) + tuple(w_only))
                elif p.kind == ActionKind.I:
                    full[k] -= 1
                    w_only[k] += 1
                elif p.kind == ActionKind.W:
                    w_only[k] -= 1
                else:
                    full[k] -= 1
        n = len(stages)
        out[rank] = [tuple((stages[k], v[k], v[n + k]) for k in range(n)) for v in _pareto(seen)]
    return out


def peak_activation_bytes(points: list[MemoryPoint], act: dict[int, int],
                          act_w: dict[int, int]) -> int:
    """Peak activation bytes of one rank given each stage's ``act_bytes`` and ``act_w_bytes``."""
    return max((sum(held_bytes(full, w, act[s], act_w[s]) for s, full, w in p) for p in points), default=0)


def _pareto(vectors: set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Vectors not dominated component-wise by another, in sorted order (deterministic)."""
    ordered = sorted(vectors, reverse=True)
    kept: list[tuple[int, ...]] = []
    for v in ordered:
        if not any(all(x >= y for x, y in zip(u, v)) for u in kept):
            kept.append(v)
    return sorted(kept)
