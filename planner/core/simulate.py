"""Simulate a schedule against stage costs: a pure function returning the timeline.

What it models:
- Each rank runs its actions one at a time, in the given order, without gaps except
  while waiting for an input (compute is one serial stream per rank).
- An action starts when the rank is free and all its ``predecessors`` have finished;
  a predecessor on another rank adds the point-to-point time of the stage boundary
  (latency + bytes / bandwidth). Sends and receives are asynchronous: they occupy no
  compute time and never block the sender.
- Durations: F, I, W from ``StageCosts`` (exposed all-to-all included); B is
  ``StageCosts.b_time`` (the measured full backward, else I + W); a fused OVERLAP_F_B
  action takes ``StageCosts.fused_time``, or ``fused_b_time`` when its backward is B.
- Memory: F allocates the stage's activation bytes at its start; I frees all but the
  weight-gradient's share at its end, W frees the rest at its end, B frees all; a fused
  F&B pair frees its backward part first and at its start (``StageCosts.memory_order``).
  Static bytes (parameters, gradients, optimizer state) are held throughout.

What it does not model: the optimizer step and gradient all-reduce after the last
action, kernel-level interference between neighbouring actions (beyond the fused
pair costs), network contention between concurrent sends, allocator fragmentation.

Since start times with a fixed per-rank order are longest paths in a DAG, the work
splits in two: ``compile_schedule`` (structure only: numbering, dependency
resolution, a topological order, deadlock detection; in ``planner.core.compiled``)
and timing (one pass with the durations, ``planner.core.order_pass``, the one timing
kernel). Solvers that re-time one schedule shape under many partitions compile once
(``simulate_compiled``); ``simulate`` compiles and times in the same pass. The memory
trace and the critical path wait until read ([Note: detail on read]).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from planner.core.compiled import KIND_CODES, Compiled, DeadlockError, compile_schedule, compile_unordered, run_in_order
from planner.core.meter import WorkMeter
from planner.core.schedule import Action, Schedule
from planner.core.stage_costs import StageCosts

__all__ = ["SimResult", "DeadlockError", "Compiled", "simulate", "compile_schedule", "simulate_compiled",
           "durations"]


@dataclass
class SimResult:
    """Timeline and summary of one simulated step."""

    step_time: float
    """Time from the first action's start to the last action's end, seconds."""
    compiled: Compiled
    """The schedule's structure (actions, ranks, order)."""
    start: list[float]
    """Start time of each node."""
    end: list[float]
    """End time of each node."""
    busy: list[float]
    """Compute time per rank."""
    peak_act_bytes: list[int]
    """Peak activation bytes per rank."""
    peak_memory_bytes: list[int]
    """Static + peak activation bytes per rank."""
    costs: StageCosts | None = None
    """The costs it was timed with; None leaves ``memory`` and ``critical_path`` empty
    (``simulate_compiled(..., detail=False)``)."""

    @functools.cached_property
    def memory(self) -> list[list[tuple[float, int]]]:
        """Per rank, (time, activation bytes held) after each change ([Note: detail on read])."""
        if self.costs is None:
            return []
        return _traces(self.compiled, self.costs, self.start, self.end)

    @functools.cached_property
    def critical_path(self) -> list[int]:
        """Nodes on the critical path, first to last ([Note: detail on read]).

        [Note: detail on read] The memory trace builds a tuple per memory change, which
        cost about as much as ordering and timing the schedule, and most callers
        (searches, the validator when no memory limit is crossed) never read it; nor the
        critical path. So both are computed on first read, from ``costs`` and the
        timeline, and kept. Peak memory, which every caller reads, is computed at once."""
        if self.costs is None:
            return []
        return _critical_path(self.compiled, self.start, self.end, self.costs.p2p_delays())

    @property
    def actions(self) -> list[Action]:
        """All actions, indexed by node."""
        return self.compiled.actions

    @property
    def rank_of(self) -> list[int]:
        """Rank of each node."""
        return self.compiled.rank_of

    @property
    def bubble(self) -> list[float]:
        """Idle time per rank within the step."""
        return [self.step_time - b for b in self.busy]

    @property
    def bubble_fraction(self) -> float:
        """Mean idle share of the step over ranks."""
        if self.step_time <= 0:
            return 0.0
        return sum(self.bubble) / (len(self.busy) * self.step_time)

    def critical_path_text(self) -> list[str]:
        """Critical path as ``rank:action`` strings."""
        return [f"{self.rank_of[n]}:{self.actions[n]}" for n in self.critical_path]


_KINDS = tuple(sorted(KIND_CODES, key=KIND_CODES.__getitem__))
"""Plain kinds in ``Compiled.units`` code order."""


def _per_unit(costs: StageCosts, value) -> list:
    """``value(kind, stage)`` per ``Compiled.units`` code (stage * 4 + kind code), plus a trailing 0 for -1."""
    return [value(k, s) for s in range(costs.num_stages) for k in _KINDS] + [0]


def durations(comp: Compiled, c: StageCosts) -> list[float]:
    """Duration of each node of ``comp`` under ``c`` (``StageCosts.duration``'s rule, per unit)."""
    table = _per_unit(c, c.kind_time)
    out = [table[u] for u in comp.units]
    pair: dict[tuple[int, int, bool], float] = {}  # a few stage pairs, thousands of fused nodes
    for n, fs, bs, full in comp.fused:
        t = pair.get((fs, bs, full))
        if t is None:
            t = pair[(fs, bs, full)] = c.pair_time(fs, bs, full)
        out[n] = t
    return out


def simulate(schedule: Schedule, costs: StageCosts, *, meter: WorkMeter | None = None) -> SimResult:
    """Play ``schedule`` against ``costs`` (see the module docstring for what is modelled).

    One pass finds the topological order and the times together (``run_in_order``); the
    returned ``compiled`` has its order, so ``simulate_compiled`` can re-time it. The
    actions timed are added to ``meter`` ([Note: timed actions] in ``planner.core.meter``)."""
    comp = compile_unordered(schedule, costs.num_stages, costs.ranks)
    dur = durations(comp, costs)
    start, end = run_in_order(comp, dur, costs.p2p_delays())
    return _result(comp, costs, dur, start, end, detail=True, meter=meter)


def simulate_compiled(comp: Compiled, costs: StageCosts, *, detail: bool = True,
                      meter: WorkMeter | None = None) -> SimResult:
    """Time an already compiled schedule with ``costs``, by the same pass as ``simulate``.
    ``detail=False`` leaves out the memory trace and the critical path (empty lists), which
    searches that only rank candidates by step time and peak memory do not read; every
    other field is the same. Otherwise they are computed when first read ([Note: detail on
    read]). The actions timed are added to ``meter``, as by ``simulate``."""
    dur = durations(comp, costs)
    start, end = run_in_order(comp, dur, costs.p2p_delays(), keep_order=False)
    return _result(comp, costs, dur, start, end, detail=detail, meter=meter)


def _result(comp: Compiled, costs: StageCosts, dur: list[float], start: list[float], end: list[float], *,
            detail: bool, meter: WorkMeter | None) -> SimResult:
    peak_act = _peaks(comp, costs)
    if meter is not None:
        meter.add(len(dur))
    static = costs.static_per_rank() + [0] * (len(comp.order) - costs.num_ranks)
    fields = dict(step_time=max(end, default=0.0), compiled=comp, start=start, end=end,
                  busy=[sum(dur[row[0]: row[-1] + 1]) if row else 0 for row in comp.order],
                  peak_act_bytes=peak_act,
                  peak_memory_bytes=[static[r] + peak_act[r] for r in range(len(peak_act))])
    return SimResult(**fields, costs=costs if detail else None)


def _held(comp: Compiled, c: StageCosts) -> list[np.ndarray]:
    """Per rank, activation bytes held after each memory change (module docstring)."""
    delta = _per_unit(c, lambda k, s: c.allocated(k, s) - c.released(k, s))
    units, _, bounds = comp.memory_events
    change = np.array(delta)[units]
    return [np.cumsum(change[lo:hi]) for lo, hi in zip(bounds, bounds[1:])]


def _peaks(comp: Compiled, c: StageCosts) -> list[int]:
    """Peak activation bytes per rank (only F raises it, so the max is at an F)."""
    return [max(0, held.max().item()) if held.size else 0 for held in _held(comp, c)]


def _traces(comp: Compiled, c: StageCosts, start: list[float], end: list[float]):
    """Per rank, (time, activation bytes held) after each memory change, from (0.0, 0)."""
    _, at, bounds = comp.memory_events
    when = start + end
    return [[(0.0, 0), *zip(map(when.__getitem__, at[lo:hi].tolist()), held.tolist())]
            for lo, hi, held in zip(bounds, bounds[1:], _held(comp, c))]


def _critical_path(comp: Compiled, start: list[float], end: list[float],
                   delay: list[float]) -> list[int]:
    """Walk back from the last node along whichever input determined each start
    (dependencies first, then the rank predecessor; the first of equals wins)."""
    if not end:
        return []
    sentinel = len(end)
    n = end.index(max(end))  # the first of equals, as max(key=...) would pick
    path = [n]
    rank_of = comp.rank_of
    # [Note: path rows] Only the path's rows are read: converting the whole dependency
    # table to lists (``Compiled.deps``) cost more than the rest of the walk.
    deps, bounds = comp.dep_array, comp.bound_array
    while True:
        (d0, d1, d2), (b0, b1, b2) = deps[n].tolist(), bounds[n].tolist()
        p = n - 1 if n and rank_of[n - 1] == rank_of[n] else sentinel
        best, best_t = -1, 0.0
        for d, b in ((d0, b0), (d1, b1), (d2, b2), (p, -1)):
            if d != sentinel and (best < 0 or end[d] + delay[b] > best_t):
                best, best_t = d, end[d] + delay[b]
        if best < 0 or best_t < start[n] - 1e-12 * max(1.0, start[n]):
            break
        n = best
        path.append(n)
    return path[::-1]
