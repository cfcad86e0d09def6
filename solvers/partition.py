"""Stage partitions: contiguous layer ranges per stage.

- ``minmax_partition``: exact dynamic programme minimising the largest stage cost
  over contiguous splits, with a per-stage feasibility test (memory); O(S N^2) calls
  to an O(1) range cost.
- ``uniform_partition``: Megatron's default: decoder layers split evenly (remainder to
  the first stages), embedding with stage 0, MTP and loss head with the last stage.
- ``weighted_partition``: min-max balance of a per-layer weight (FLOPs or parameters,
  as DeepSpeed's ``partition_method``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from planner.core.errors import InfeasibleError

__all__ = ["minmax_partition", "uniform_partition", "weighted_partition", "prefix_sums"]

Bounds = list[tuple[int, int]]


def prefix_sums(values: Sequence[float]) -> list[float]:
    """``p[k] = sum(values[:k])``."""
    out = [0.0]
    for v in values:
        out.append(out[-1] + v)
    return out


def minmax_partition(num_layers: int, num_stages: int, cost: Callable[[int, int, int], float],
                     feasible: Callable[[int, int, int], bool] | None = None) -> Bounds:
    """Split ``range(num_layers)`` into ``num_stages`` non-empty contiguous ranges minimising
    ``max_s cost(s, start, end)`` subject to ``feasible(s, start, end)``.

    Ties are broken towards the lexicographically smallest sum of squared costs is not
    attempted; the first optimal split found (earliest boundaries) is returned, which
    makes the result deterministic. Raises ``InfeasibleError`` when no split is feasible.
    """
    n, S = num_layers, num_stages
    if S > n:
        raise InfeasibleError(f"{n} layers cannot fill {S} stages: lower pp or vpp")
    inf = math.inf
    # best[s][e]: minimal max-cost of stages 0..s-1 covering layers [0, e)
    best = [[inf] * (n + 1) for _ in range(S + 1)]
    arg = [[-1] * (n + 1) for _ in range(S + 1)]
    best[0][0] = 0.0
    for s in range(1, S + 1):
        lo_e, hi_e = s, n - (S - s)
        for e in range(lo_e, hi_e + 1):
            b_best, b_arg = inf, -1
            for a in range(s - 1, e):
                prev = best[s - 1][a]
                if prev >= b_best:
                    continue
                if feasible is not None and not feasible(s - 1, a, e):
                    continue
                v = max(prev, cost(s - 1, a, e))
                if v < b_best:
                    b_best, b_arg = v, a
            best[s][e], arg[s][e] = b_best, b_arg
    if best[S][n] == inf:
        raise InfeasibleError("no contiguous partition satisfies the per-stage limits")
    bounds: Bounds = []
    e = n
    for s in range(S, 0, -1):
        a = arg[s][e]
        bounds.append((a, e))
        e = a
    return bounds[::-1]


def uniform_partition(roles: Sequence[str], num_stages: int) -> Bounds:
    """Megatron's even split of decoder layers; embedding first, MTP and head last."""
    dec = [k for k, r in enumerate(roles) if r == "decoder"]
    if len(dec) < num_stages:
        raise InfeasibleError(f"{len(dec)} decoder layers cannot be split evenly over {num_stages} stages")
    base, extra = divmod(len(dec), num_stages)
    cuts = [0]
    k = 0
    for s in range(num_stages - 1):
        k += base + (1 if s < extra else 0)
        cuts.append(dec[k])
    cuts.append(len(roles))
    return [(cuts[s], cuts[s + 1]) for s in range(num_stages)]


def weighted_partition(weights: Sequence[float], num_stages: int,
                       feasible: Callable[[int, int, int], bool] | None = None) -> Bounds:
    """Min-max balance of ``weights`` over contiguous stages."""
    p = prefix_sums(weights)
    return minmax_partition(len(weights), num_stages, lambda s, a, b: p[b] - p[a], feasible)
