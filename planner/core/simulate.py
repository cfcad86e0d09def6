"""Simulate a schedule against stage costs: a pure function returning the timeline.

What it models:
- Each rank runs its actions one at a time, in the given order, without gaps except
  while waiting for an input (compute is one serial stream per rank).
- An action starts when the rank is free and all its ``predecessors`` have finished;
  a predecessor on another rank adds the point-to-point time of the stage boundary
  (latency + bytes / bandwidth). Sends and receives are asynchronous: they occupy no
  compute time and never block the sender.
- Durations: F, I, W from ``StageCosts`` (exposed all-to-all included); B = I + W; a
  fused OVERLAP_F_B action takes ``StageCosts.fused_time`` (+ W when its backward is B).
- Memory: F allocates the stage's activation bytes at its start; I frees all but the
  weight-gradient's share at its end, W frees the rest at its end, B frees all.
  Static bytes (parameters, gradients, optimizer state) are held throughout.

What it does not model: the optimizer step and gradient all-reduce after the last
action, kernel-level interference between neighbouring actions (beyond the fused
pair costs), network contention between concurrent sends, allocator fragmentation.

Since start times with a fixed per-rank order are longest paths in a DAG, the work
splits in two: ``compile_schedule`` (structure only: numbering, dependency
resolution, a topological order, deadlock detection) and ``simulate_compiled``
(one pass over that order with the durations). Solvers that re-time one schedule
shape under many partitions compile once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.core.schedule import Action, Schedule, predecessors, provides
from planner.core.stage_costs import StageCosts

__all__ = ["SimResult", "DeadlockError", "Compiled", "simulate", "compile_schedule",
           "simulate_compiled"]

_MAX_DEPS = 3  # a fused (F;B) needs F(s-1), F(s') and I(s'+1)


class DeadlockError(ValueError):
    """The schedule cannot make progress: each blocked rank waits for work that never comes."""

    def __init__(self, message: str, blocked: dict[int, int]) -> None:
        super().__init__(message)
        self.blocked = blocked
        """Rank -> position of the action it is stuck on."""


@dataclass(frozen=True)
class Compiled:
    """A schedule lowered to integer arrays; node n is ``actions[n]`` on ``rank_of[n]``."""

    actions: list[Action]
    rank_of: list[int]
    order: list[list[int]]
    """Nodes of each rank in execution order."""
    topo: list[int]
    """All nodes in an order where each comes after its rank predecessor and its dependencies."""
    prev: list[int]
    """Node before n on its rank, or the sentinel ``len(actions)``."""
    deps: list[tuple[int, ...]]
    """Up to 3 dependency nodes per node, padded with the sentinel."""
    bounds: list[tuple[int, ...]]
    """Stage boundary each dependency crosses between ranks (its P2P cost), or -1 when local."""


def _resolve(schedule: Schedule, num_stages: int, ranks: tuple[int, ...] | list[int]):
    actions: list[Action] = []
    rank_of: list[int] = []
    nr = max(max(ranks) + 1, max(schedule, default=-1) + 1)
    order: list[list[int]] = [[] for _ in range(nr)]
    where: dict[tuple[int, str, int], int] = {}
    for r in sorted(schedule):
        for a in schedule[r]:
            n = len(actions)
            actions.append(a)
            rank_of.append(r)
            order[r].append(n)
            for key in provides(a):
                where[key] = n
    sentinel = len(actions)
    deps, bounds = [], []
    for n, a in enumerate(actions):
        dn, bn = [], []
        for key in predecessors(a, num_stages):
            d = where.get(key)
            if d is None:
                raise ValueError(f"rank {rank_of[n]}: action {a} needs {key[0]}{key[1]}{key[2]},"
                                 " which no rank runs")
            dn.append(d)
            # F(s-1) -> F(s) crosses boundary s-1; I(s+1) -> I(s) crosses boundary s.
            cross = rank_of[d] != rank_of[n]
            bn.append((key[0] if key[1] == "F" else key[0] - 1) if cross else -1)
        pad = _MAX_DEPS - len(dn)
        deps.append(tuple(dn) + (sentinel,) * pad)
        bounds.append(tuple(bn) + (-1,) * pad)
    return actions, rank_of, order, deps, bounds


def compile_schedule(schedule: Schedule, num_stages: int,
                     ranks: tuple[int, ...] | list[int]) -> Compiled:
    """Resolve dependencies and find a topological order; raises ``DeadlockError`` when the
    ranks cannot all finish and ``ValueError`` when a needed unit of work is never run."""
    actions, rank_of, order, deps, bounds = _resolve(schedule, num_stages, ranks)
    sentinel = len(actions)
    done = [False] * (sentinel + 1)
    done[sentinel] = True
    prev = [sentinel] * sentinel
    topo: list[int] = []
    ptr = [0] * len(order)
    waiters: dict[int, list[int]] = {}
    stack = list(range(len(order) - 1, -1, -1))
    while stack:
        r = stack.pop()
        row, k = order[r], ptr[r]
        while k < len(row):
            n = row[k]
            blocker = next((d for d in deps[n] if not done[d]), None)
            if blocker is not None:
                waiters.setdefault(blocker, []).append(r)
                break
            if k:
                prev[n] = row[k - 1]
            done[n] = True
            topo.append(n)
            k += 1
            stack.extend(waiters.pop(n, ()))
        ptr[r] = k
    blocked = {r: ptr[r] for r in range(len(order)) if ptr[r] < len(order[r])}
    if blocked:
        raise DeadlockError("deadlock: " + ", ".join(
            f"rank {r} stuck at position {p} ({actions[order[r][p]]})" for r, p in blocked.items()),
            blocked)
    return Compiled(actions, rank_of, order, topo, prev, deps, bounds)


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
    memory: list[list[tuple[float, int]]] = field(default_factory=list)
    """Per rank, (time, activation bytes held) after each change."""
    critical_path: list[int] = field(default_factory=list)
    """Nodes on the critical path, first to last."""

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


def _durations(actions: list[Action], c: StageCosts) -> list[float]:
    f, i, w = c.f, c.i, c.w
    table = {"F": f, "I": i, "W": w}
    out = []
    for a in actions:
        arr = table.get(a.kind)
        if arr is not None:
            out.append(arr[a.stage])
        elif a.kind == "B":
            out.append(i[a.stage] + w[a.stage])
        else:
            fw, bw = a.sub
            out.append(c.fused_time(fw.stage, bw.stage) + (w[bw.stage] if bw.kind == "B" else 0.0))
    return out


def simulate(schedule: Schedule, costs: StageCosts) -> SimResult:
    """Play ``schedule`` against ``costs`` (see the module docstring for what is modelled)."""
    return simulate_compiled(compile_schedule(schedule, costs.num_stages, costs.ranks), costs)


def simulate_compiled(comp: Compiled, costs: StageCosts) -> SimResult:
    """Time an already compiled schedule with ``costs``."""
    dur = _durations(comp.actions, costs)
    nn = len(dur)
    delay = [costs.p2p_time(s) for s in range(costs.num_stages)] + [0.0]  # index -1 -> 0
    end = [0.0] * (nn + 1)
    start = [0.0] * nn
    prev, deps, bounds = comp.prev, comp.deps, comp.bounds
    for n in comp.topo:
        t = end[prev[n]]
        d0, d1, d2 = deps[n]
        b0, b1, b2 = bounds[n]
        x = end[d0] + delay[b0]
        if x > t:
            t = x
        x = end[d1] + delay[b1]
        if x > t:
            t = x
        x = end[d2] + delay[b2]
        if x > t:
            t = x
        start[n] = t
        end[n] = t + dur[n]
    del end[nn]
    step = max(end, default=0.0)
    busy = [sum(dur[n] for n in row) for row in comp.order]
    peak_act, memory = _memory(comp, costs, start, end)
    static = costs.static_per_rank() + [0] * (len(comp.order) - costs.num_ranks)
    return SimResult(step_time=step, compiled=comp, start=start, end=end, busy=busy,
                     peak_act_bytes=peak_act,
                     peak_memory_bytes=[static[r] + peak_act[r] for r in range(len(peak_act))],
                     memory=memory, critical_path=_critical_path(comp, start, end, delay))


def _memory(comp: Compiled, c: StageCosts, start: list[float], end: list[float]):
    act, keep = c.act_bytes, c.act_w_bytes
    peaks, traces = [], []
    for row in comp.order:
        held = peak = 0
        trace: list[tuple[float, int]] = [(0.0, 0)]
        for n in row:
            for p in comp.actions[n].parts:
                k, s = p.kind, p.stage
                if k == "F":
                    held += act[s]
                    trace.append((start[n], held))
                    if held > peak:
                        peak = held
                else:
                    held -= act[s] - keep[s] if k == "I" else keep[s] if k == "W" else act[s]
                    trace.append((end[n], held))
        peaks.append(peak)
        traces.append(trace)
    return peaks, traces


def _critical_path(comp: Compiled, start: list[float], end: list[float],
                   delay: list[float]) -> list[int]:
    """Walk back from the last node along whichever input determined each start."""
    if not end:
        return []
    sentinel = len(end)
    n = max(range(len(end)), key=end.__getitem__)
    path = [n]
    while True:
        cands = [(d, delay[b]) for d, b in zip(comp.deps[n], comp.bounds[n]) if d != sentinel]
        if comp.prev[n] != sentinel:
            cands.append((comp.prev[n], 0.0))
        best = max(cands, key=lambda db: end[db[0]] + db[1], default=None)
        if best is None or end[best[0]] + best[1] < start[n] - 1e-12 * max(1.0, start[n]):
            break
        n = best[0]
        path.append(n)
    return path[::-1]
