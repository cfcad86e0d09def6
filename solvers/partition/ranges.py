"""Stage partitions: contiguous layer ranges per stage.

- ``minmax_partition``: exact dynamic programme minimising the largest stage cost
  ``max_s cost(s, start, end)`` over contiguous splits, with a per-stage feasibility
  test (memory, pinned boundaries), O(S N^2) calls to an O(1) range cost. The cost may
  depend on the stage index (position in the pipeline), so any objective of the form
  "max over stages of a term of that stage's position and range" is solved exactly
  (``solvers.partition.model`` builds such a term for the step time). With
  ``tie_break`` it returns, among all min-max optimal splits, one minimising
  ``sum_s tie_break(s, start, end)``: exact for the lexicographic objective.
- ``k_best_partitions``: the k splits with the smallest max-cost (exact; ties broken
  by boundary order), for re-ranking by simulation.
- ``uniform_partition``: Megatron's default: decoder layers split evenly (remainder to
  the first stages), embedding with stage 0, MTP and loss head with the last stage;
  ``first``/``last`` pin the decoder layers of the first and last stage
  (Megatron's ``--decoder-first/last-pipeline-num-layers``).
- ``weighted_partition``: min-max balance of a per-layer weight (FLOPs or parameters,
  as DeepSpeed's ``partition_method``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

from planner.core.errors import InfeasibleError
from planner.core.placement import Bounds

__all__ = ["minmax_partition", "k_best_partitions", "range_table", "uniform_partition", "weighted_partition",
           "prefix_sums", "RangeMax", "RangeCost", "RangeTest"]

RangeCost = Callable[[int, int, int], float]
"""(stage, start, end) -> cost of the stage holding layers [start, end)."""
RangeTest = Callable[[int, int, int], bool]
"""(stage, start, end) -> whether that stage may hold layers [start, end)."""


def prefix_sums(values: Sequence[float]) -> list[float]:
    """``p[k] = sum(values[:k])``."""
    out = [0.0]
    for v in values:
        out.append(out[-1] + v)
    return out


class RangeMax:
    """Largest of ``values[a:b]`` in O(1) (a sparse table: max over two overlapping
    power-of-two windows)."""

    def __init__(self, values: Sequence[int]) -> None:
        self._rows = [list(values)]
        width = 1
        while 2 * width <= len(values):
            prev = self._rows[-1]
            self._rows.append([max(prev[i], prev[i + width]) for i in range(len(prev) - width)])
            width *= 2

    def __call__(self, a: int, b: int) -> int:
        """max(values[a:b]); 0 for an empty range."""
        if b <= a:
            return 0
        level = (b - a).bit_length() - 1
        row = self._rows[level]
        return max(row[a], row[b - (1 << level)])


def range_table(num_layers: int, num_stages: int, cost: RangeCost,
                feasible: RangeTest | None = None) -> list[list[list[float]]]:
    """``c[s][a][e]``: cost of stage s on [a, e), inf where infeasible or unreachable; build
    once and pass as ``table=`` to several solvers over the same cost."""
    n, S = num_layers, num_stages
    inf = math.inf
    c = [[[inf] * (n + 1) for _ in range(n + 1)] for _ in range(S)]
    for s in range(S):
        for a in range(s, n - (S - s) + 1):
            row = c[s][a]
            for e in range(a + 1, n - (S - s - 1) + 1):
                if feasible is None or feasible(s, a, e):
                    row[e] = cost(s, a, e)
    return c


def _minmax_values(c: list[list[list[float]]], n: int, S: int):
    """Forward DP: ``best[s][e]`` minimal max-cost of stages 0..s-1 covering [0, e)."""
    inf = math.inf
    best = [[inf] * (n + 1) for _ in range(S + 1)]
    arg = [[-1] * (n + 1) for _ in range(S + 1)]
    best[0][0] = 0.0
    for s in range(1, S + 1):
        cs = c[s - 1]
        prev = best[s - 1]
        for e in range(s, n - (S - s) + 1):
            b_best, b_arg = inf, -1
            for a in range(s - 1, e):
                p = prev[a]
                if p >= b_best:
                    continue
                v = cs[a][e]
                v = p if p > v else v
                if v < b_best:
                    b_best, b_arg = v, a
            best[s][e], arg[s][e] = b_best, b_arg
    return best, arg


def _min_sum_below(c, h: RangeCost, n: int, S: int, cap: float):
    """Min ``sum h`` over splits whose every stage cost is <= cap; back-pointers."""
    inf = math.inf
    best = [[inf] * (n + 1) for _ in range(S + 1)]
    arg = [[-1] * (n + 1) for _ in range(S + 1)]
    best[0][0] = 0.0
    for s in range(1, S + 1):
        for e in range(s, n - (S - s) + 1):
            for a in range(s - 1, e):
                if best[s - 1][a] == inf or c[s - 1][a][e] > cap:
                    continue
                v = best[s - 1][a] + h(s - 1, a, e)
                if v < best[s][e]:
                    best[s][e], arg[s][e] = v, a
    return best, arg


def _walk_back(arg: list[list[int]], n: int, S: int) -> Bounds:
    bounds: Bounds = []
    e = n
    for s in range(S, 0, -1):
        a = arg[s][e]
        bounds.append((a, e))
        e = a
    return bounds[::-1]


def _check_sizes(n: int, S: int) -> None:
    if S > n:
        raise InfeasibleError(f"{n} layers cannot fill {S} stages: lower pp or vpp")


def minmax_partition(num_layers: int, num_stages: int, cost: RangeCost,
                     feasible: RangeTest | None = None, *,
                     tie_break: RangeCost | None = None,
                     table: list[list[list[float]]] | None = None) -> Bounds:
    """Split ``range(num_layers)`` into ``num_stages`` non-empty contiguous ranges minimising
    ``max_s cost(s, start, end)`` subject to ``feasible(s, start, end)``.

    Without ``tie_break`` the optimal split with the earliest boundaries is returned;
    with it, the optimal split with the smallest ``sum_s tie_break(s, start, end)``.
    ``table`` (from ``range_table`` with the same cost and test) skips recomputing costs.
    Raises ``InfeasibleError`` when no split is feasible.
    """
    n, S = num_layers, num_stages
    _check_sizes(n, S)
    c = table if table is not None else range_table(n, S, cost, feasible)
    best, arg = _minmax_values(c, n, S)
    opt = best[S][n]
    if opt == math.inf:
        raise InfeasibleError("no contiguous partition satisfies the per-stage limits")
    if tie_break is None:
        return _walk_back(arg, n, S)
    cap = opt + 1e-12 * max(1.0, abs(opt))
    _, arg2 = _min_sum_below(c, tie_break, n, S, cap)
    return _walk_back(arg2, n, S)


def k_best_partitions(num_layers: int, num_stages: int, cost: RangeCost, k: int,
                      feasible: RangeTest | None = None, *,
                      table: list[list[list[float]]] | None = None) -> list[tuple[float, Bounds]]:
    """The ``k`` feasible splits with the smallest ``max_s cost`` (fewer if fewer exist),
    best first, as ``(max cost, bounds)``.

    Exact: max is monotone in the prefix value, so every one of the k best splits has a
    prefix among the k best prefixes of its (stage, end) state; ties are broken by
    (value, boundary position, rank of the prefix), which makes the answer deterministic.
    """
    n, S = num_layers, num_stages
    _check_sizes(n, S)
    c = table if table is not None else range_table(n, S, cost, feasible)
    inf = math.inf
    # keep[s][e]: up to k entries (value, a, j): stage s-1 is [a, e) after prefix j of keep[s-1][a]
    keep: list[list[list[tuple[float, int, int]]]] = [[[] for _ in range(n + 1)] for _ in range(S + 1)]
    keep[0][0] = [(0.0, -1, -1)]
    for s in range(1, S + 1):
        for e in range(s, n - (S - s) + 1):
            cands = []
            for a in range(s - 1, e):
                g = c[s - 1][a][e]
                if g == inf:
                    continue
                cands.extend((max(v, g), a, j) for j, (v, _, _) in enumerate(keep[s - 1][a]))
            keep[s][e] = heapq.nsmallest(k, cands)
    out = []
    for j, (v, _, _) in enumerate(keep[S][n]):
        bounds: Bounds = []
        e, idx = n, j
        for s in range(S, 0, -1):
            _, a, prev = keep[s][e][idx]
            bounds.append((a, e))
            e, idx = a, prev
        out.append((v, bounds[::-1]))
    return out


def uniform_partition(roles: Sequence[str], num_stages: int, *, first: int | None = None,
                      last: int | None = None) -> Bounds:
    """Megatron's even split of decoder layers; embedding first, MTP and head last.

    ``first``/``last`` fix the decoder layers of the first/last stage; the others are
    spread evenly over the middle stages (remainder to the earlier ones).
    """
    dec = [k for k, r in enumerate(roles) if r == "decoder"]
    counts = _uniform_counts(len(dec), num_stages, first, last)
    cuts = [0]
    k = 0
    for s in range(num_stages - 1):
        k += counts[s]
        cuts.append(dec[k] if k < len(dec) else dec[-1] + 1)
    cuts.append(len(roles))
    if any(b <= a for a, b in zip(cuts, cuts[1:])):
        raise InfeasibleError(f"{len(dec)} decoder layers cannot be split evenly over "
                              f"{num_stages} stages with non-empty stages")
    return [(cuts[s], cuts[s + 1]) for s in range(num_stages)]


def _uniform_counts(n_dec: int, S: int, first: int | None, last: int | None) -> list[int]:
    if S == 1:
        return [n_dec]
    lo = 1 if first is not None else 0
    hi = S - 1 if last is not None else S
    rest = n_dec - (first or 0) - (last or 0)
    mid = hi - lo
    if rest < 0 or (mid > 0 and rest < mid) or (mid == 0 and rest != 0):
        raise InfeasibleError(f"{n_dec} decoder layers cannot be split evenly over {S} stages"
                              + (" with the pinned first/last stage sizes" if lo or hi < S else ""))
    base, extra = divmod(rest, mid) if mid else (0, 0)
    counts = [base + (1 if k < extra else 0) for k in range(mid)]
    return ([first] if lo else []) + counts + ([last] if hi < S else [])


def weighted_partition(weights: Sequence[float], num_stages: int,
                       feasible: RangeTest | None = None) -> Bounds:
    """Min-max balance of ``weights`` over contiguous stages. Without ``feasible`` a range
    costs the same on every stage, so one ``[start][end]`` table serves them all (the DP
    reads only the cells ``range_table`` fills): what the degree screen runs per candidate."""
    n, p = len(weights), prefix_sums(weights)
    if feasible is not None:
        return minmax_partition(n, num_stages, lambda s, a, b: p[b] - p[a], feasible)
    _check_sizes(n, num_stages)
    row = [[p[e] - p[a] if e > a else math.inf for e in range(n + 1)] for a in range(n + 1)]
    return minmax_partition(n, num_stages, lambda s, a, b: p[b] - p[a], table=[row] * num_stages)
