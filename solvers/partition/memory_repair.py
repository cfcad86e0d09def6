"""A chunk partition that fits every rank's memory, found by moving boundaries (vpp > 1).

With several stages per rank a rank's peak is a sum over non-adjacent chunks at its
memory points (``solvers.partition.inflight``), so the split that balances each *stage's*
memory (``minmax_partition`` on ``StepModel.stage_memory``) can leave a rank over its cap
while a split that balances the *ranks* fits, and so can the chunk-sequence DP's work-balanced
split that warm-starts CP-SAT (``solvers.partition.virtual``). CP-SAT handles the coupling, but
from a start over memory its budget can run out before any split that fits, or end on a poor
one (Megatron-Bridge's Llama 3.1 405B on 256 GB200s, pp 16 x vpp 4 at 158 of 164.6 GiB). The
search repairs its warm start with this, and when CP-SAT still finds nothing it tries the
memory-balanced split repaired, before it says the budget ran out ([Note: unproven] in
``solvers.partition.search``).

Descent on the ranks' overshoot: from a start, pass one layer from a stage to a neighbouring
one (one boundary moves), or when no such pass helps from a stage to any farther one (the
boundaries between them shift by one layer each: ``virtual_moves.pass_layer``, the joint
search's move); stages stay non-empty and pinned boundaries stay. Each step keeps the pass that most lowers ``(bytes over the caps, largest peak / cap)``,
until every rank fits or no pass lowers it. A step costs ``2 (S - 1)`` evaluations of
``StepModel.rank_memory`` (prefix sums, no simulation), ``S (S - 1)`` when it reaches farther.
"""

from __future__ import annotations

from planner.core.placement import Bounds
from solvers.partition.model import StepModel
from solvers.partition.virtual_moves import pass_layer

__all__ = ["repair_memory"]

MAX_EVALUATIONS = 20_000
"""Partitions one repair may evaluate (work, not wall time, so the same inputs give the same
answer): at pp 16 x vpp 4 a step to neighbours is 126 of them, one reaching every stage 4,032.
The descent ends as soon as a split fits."""


def _overshoot(model: StepModel, bounds: Bounds, caps: tuple[int, ...]) -> tuple[int, float]:
    """(total bytes above the caps, largest peak / cap over ranks): a zero first term fits."""
    mem = model.rank_memory(bounds)
    return sum(max(0, mem[r] - caps[r]) for r in mem), max(mem[r] / caps[r] for r in mem)


def _moves(bounds: Bounds, pinned: frozenset[int], near: bool):
    """Every ``pass_layer`` move: to a neighbouring stage (``near``) or to any farther one."""
    S = len(bounds)
    for c in range(S):
        for t in ((c - 1, c + 1) if near else [t for t in range(S) if abs(t - c) > 1]):
            if 0 <= t < S and (moved := pass_layer(bounds, c, t, pinned)) is not None:
                yield moved


def repair_memory(model: StepModel, start: Bounds, caps: tuple[int, ...],
                  pinned: frozenset[int] = frozenset()) -> Bounds | None:
    """A partition near ``start`` within ``caps`` on every rank, or None when the descent stops
    above them (which proves nothing: the caller then reports an unproven shortfall).
    ``pinned``: boundary indices k (stage k's first layer) that may not move."""
    bounds = list(start)
    score, spent = _overshoot(model, bounds, caps), 1
    while score[0] > 0 and spent < MAX_EVALUATIONS:
        best = None
        for near in (True, False):  # a neighbour first; farther stages only when none helps
            for trial in _moves(bounds, pinned, near):
                got, spent = _overshoot(model, trial, caps), spent + 1
                if best is None or got < best[0]:
                    best = (got, trial)
            if best is not None and best[0] < score:
                break
        if best is None or best[0] >= score:
            return None
        score, bounds = best
    return bounds if score[0] == 0 else None
