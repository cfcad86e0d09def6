"""Post-overlap cost of every contiguous layer range, precomputed.

In its steady state a stage holding layers [a, b) runs F of layer a+j beside the
input-gradient of layer b-1-j (Megatron pairs F.layer[0] with B.layer[last]), so
its overlapped F+I cost is ``sum_j OV[a+j, b-1-j]``. This is not additive
per layer; with ``P[a][b]`` that sum, ``P[a][b] = OV[a, b-1] + OV[b-1, a] + P[a+1][b-1]``
for b - a >= 2, ``P[a][a+1] = OV[a, a]``: all O(N^2) ranges in O(N^2) time.
"""

from __future__ import annotations

from planner.core.costs import CostTable
from solvers.partition.ranges import prefix_sums

__all__ = ["OverlapRangeCost"]


class OverlapRangeCost:
    """O(1) range queries of overlapped and serial stage costs."""

    def __init__(self, table: CostTable) -> None:
        n = table.num_layers
        self.table = table
        pair = [[0.0] * (n + 1) for _ in range(n + 1)]
        for length in range(1, n + 1):
            for a in range(0, n - length + 1):
                b = a + length
                if length == 1:
                    pair[a][b] = table.ov(a, a)
                else:
                    pair[a][b] = table.ov(a, b - 1) + table.ov(b - 1, a) + (pair[a + 1][b - 1] if length > 2 else 0.0)
        self._pair = pair
        self._f = prefix_sums([lc.serial_f for lc in table.layers])
        self._i = prefix_sums([lc.serial_i for lc in table.layers])
        self._w = prefix_sums([lc.w for lc in table.layers])
        self._bx = prefix_sums([lc.serial_b - lc.serial_i for lc in table.layers])

    def overlapped(self, a: int, b: int) -> float:
        """F beside I over layers [a, b), paired as in the module doc."""
        return self._pair[a][b]

    def serial(self, a: int, b: int) -> float:
        """F + I over [a, b) without overlap."""
        return self._f[b] - self._f[a] + self._i[b] - self._i[a]

    def weight(self, a: int, b: int) -> float:
        """W over [a, b)."""
        return self._w[b] - self._w[a]

    def full_extra(self, a: int, b: int) -> float:
        """What a full backward B over [a, b) costs beyond its I (W unless B was measured;
        negative when a measured B is cheaper than I alone)."""
        return self._bx[b] - self._bx[a]

    def forward(self, a: int, b: int) -> float:
        """Serial F over [a, b)."""
        return self._f[b] - self._f[a]

    def backward(self, a: int, b: int) -> float:
        """Serial I over [a, b)."""
        return self._i[b] - self._i[a]

    def steady(self, a: int, b: int) -> float:
        """One steady-state step of the stage: overlapped F+I plus W."""
        return self._pair[a][b] + self.weight(a, b)
