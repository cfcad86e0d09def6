"""Schedule-aware partition refinement: move stage boundaries under a fixed schedule order.

The DP partitions optimise a model of the step (steady-state cost plus fill and drain
terms). Once a schedule is fixed (W moved into bubbles, F&B fused), the part of each
stage that is exposed differs from that model. This pass scores partitions by the
simulator itself: the schedule is compiled once (``compile_schedule``), and each
neighbour (one boundary moved by one layer, or a layer passed along two boundaries) is
re-timed with ``simulate_compiled``. It is steepest-descent hill climbing with a fixed
neighbour order, so it is deterministic; it stops at a local optimum or after
``max_rounds`` improving moves or when ``deadline`` (perf_counter time) passes. With several
stages per rank (vpp > 1) the boundaries are then also moved several at once
(``solvers.partition.virtual_moves``), and the faster of the two results is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from planner.core.costs import CostTable
from planner.core.meter import WorkMeter
from planner.core.placement import Bounds
from planner.core.schedule import Schedule
from planner.core.simulate import Compiled, compile_schedule, simulate_compiled
from planner.core.stage_costs import StageCosts, stage_costs
from solvers.partition.virtual_moves import joint_moves

__all__ = ["RefineResult", "refine_partition", "boundary_neighbours"]



@dataclass(frozen=True)
class RefineResult:
    """Outcome of ``refine_partition``."""

    bounds: Bounds
    """Best partition found."""
    step_time: float
    """Its simulated step time."""
    rounds: int
    """Improving moves taken."""
    evaluated: int
    """Partitions simulated."""


def boundary_neighbours(bounds: Bounds, pinned: frozenset[int] = frozenset()) -> list[Bounds]:
    """Partitions one move away: boundary k shifted by +-1 layer (stages stay non-empty).

    ``pinned`` holds boundary indices (1..S-1, boundary k starts stage k) that must not move.
    """
    cuts = [a for a, _ in bounds] + [bounds[-1][1]]
    out = []
    for k in range(1, len(cuts) - 1):
        if k in pinned:
            continue
        for d in (-1, 1):
            c = cuts[k] + d
            if cuts[k - 1] < c < cuts[k + 1]:
                new = cuts[:k] + [c] + cuts[k + 1:]
                out.append([(new[s], new[s + 1]) for s in range(len(new) - 1)])
    return out


def refine_partition(table: CostTable, schedule: Schedule, bounds: Bounds, ranks: list[int], *,
                     fits: Callable[[StageCosts, list[int]], bool] | None = None,
                     pinned: frozenset[int] = frozenset(), max_rounds: int = 64,
                     deadline: float | None = None, compiled: Compiled | None = None,
                     meter: WorkMeter | None = None, stop: Callable[[], bool] | None = None) -> RefineResult:
    """Hill-climb ``bounds`` by simulated step time under ``schedule``.

    ``fits(stage_costs, peak_memory_bytes_per_rank)`` rejects partitions over the memory
    limit (the planner passes ``MemoryLimit.fits``, the validator's check). Each re-timing
    is charged to ``meter`` (the plan's ``WorkMeter``). ``stop`` (the planner's work budget)
    bounds the joint moves of vpp > 1.
    """
    comp = compiled or compile_schedule(schedule, len(bounds), ranks)

    def score(b: Bounds) -> float | None:
        sc = stage_costs(table, b, ranks)
        sim = simulate_compiled(comp, sc, detail=False, meter=meter)
        if fits is not None and not fits(sc, sim.peak_memory_bytes):
            return None
        return sim.step_time

    best, best_t = list(bounds), score(bounds)
    if best_t is None:
        best_t = float("inf")
    evaluated, rounds = 1, 0
    while rounds < max_rounds:
        improved = None
        for nb in boundary_neighbours(best, pinned):
            if deadline is not None and time.perf_counter() > deadline:
                break
            t = score(nb)
            evaluated += 1
            if t is not None and t < best_t * (1 - 1e-9) and (improved is None or t < improved[1]):
                improved = (nb, t)
        if improved is None:
            break
        best, best_t = improved
        rounds += 1
    if len(bounds) > len(set(ranks)):
        joint = joint_moves(table, comp, best, ranks, fits=fits, pinned=pinned, deadline=deadline, stop=stop,
                            meter=meter)
        evaluated += joint.evaluated
        if joint.step_time < best_t:
            best, best_t, rounds = joint.bounds, joint.step_time, rounds + joint.rounds
    return RefineResult(best, best_t, rounds, evaluated)
