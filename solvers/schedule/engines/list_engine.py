"""Event-driven list scheduling with movable weight-gradient (W) tasks.

One engine serves two passes:

- ``solvers.schedule.engines.w_fill.fill_w``: the F/I order of every rank is fixed (taken from a
  generator) and only the W tasks move;
- ``solvers.schedule.engines.list_scheduler.list_schedule``: the F/I order is chosen greedily too
  (input-gradients first, oldest microbatch first, forwards admitted while the
  activation budget allows), which adapts zero-bubble schedules to heterogeneous costs.

The engine plays the step forward in time with the simulator's model
(``planner.core.simulate``), each rank choosing what to start in a fixed order of
preference (``run_engine``).

[Note: W memory] Deferring a W keeps its ``act_w_bytes`` alive; the engine counts
them, so a forward that would exceed the budget first drains pending W tasks.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Protocol

from planner.core.p2p import crossed_boundary
from planner.core.schedule import DEPENDENCIES, OVERLAP, Action, ActionKind, Key, Schedule, predecessors, provides
from planner.core.stage_costs import StageCosts

__all__ = ["Policy", "EngineResult", "run_engine"]

_EPS = 1e-12


class Policy(Protocol):
    """Chooses F/I work for the engine."""

    def candidates(self, rank: int) -> list[Action]:
        """F/I (or fused) actions the rank may run next, in preference order."""

    def admit(self, rank: int, action: Action, held: int, limit: int | None) -> bool:
        """Whether the rank may start ``action`` while holding ``held`` activation bytes."""

    def committed(self, rank: int, action: Action) -> None:
        """Record that the rank started ``action``."""

    def pick(self, rank: int, ready: list[Action]) -> Action:
        """The action to run among those ready now (may fuse two of them)."""


@dataclass
class EngineResult:
    """What the engine produced."""

    schedule: Schedule | None
    """Per-rank actions in start order; None when the engine got stuck."""
    makespan: float = 0.0
    """Engine's own timing of the result (matches the simulator)."""
    reason: str = ""
    """Why it got stuck (memory or deadlock), empty on success."""


@dataclass
class _State:
    costs: StageCosts
    limit: list[int | None]
    """Activation bytes each rank may hold (None: no limit)."""
    deadlines: dict[Key, float]
    end: dict[Key, float] = field(default_factory=dict)
    free: list[float] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    pending: list[list[Key]] = field(default_factory=list)
    out: list[list[Action]] = field(default_factory=list)
    wake: list[float | None] = field(default_factory=list)
    heap: list[tuple[float, int]] = field(default_factory=list)
    succ_ranks: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    w_mode: str = "eager"
    """When an idle rank runs a pending W (see ``run_engine``)."""
    p2p: list[float] = field(default_factory=list)
    """Per stage: seconds to send its output (or its gradient back)."""
    deps: dict[str, list[list[tuple[int, str]]]] = field(default_factory=dict)
    """Kind -> per stage: (stage, kind) of the same microbatch a plain action needs."""


def _arrival(st: _State, key: Key, rank: int, x: float) -> tuple[float, bool]:
    """When ``key``'s result can be used on ``rank``: exact if it ran, else a lower bound."""
    s, kind, _ = key
    src = st.costs.ranks[s]
    delay = 0.0
    if src != rank:
        delay = st.p2p[crossed_boundary(s, kind)]
    end = st.end.get(key)
    if end is not None:
        return end + delay, True
    return max(x, st.free[src]) + st.costs.kind_time(kind, s) + delay, False


def _ready(st: _State, action: Action, rank: int, x: float) -> tuple[float, bool]:
    t, known = 0.0, True
    if action.kind == OVERLAP:
        keys = predecessors(action, st.costs.num_stages)
    else:
        m = action.microbatch
        keys = [(s, kind, m) for s, kind in st.deps[action.kind][action.stage]]
    for key in keys:
        a, k = _arrival(st, key, rank, x)
        if a > t:
            t = a
        known = known and k
    return t, known


def _push(st: _State, rank: int, t: float) -> None:
    t = max(t, st.free[rank])
    if st.wake[rank] is None or t < st.wake[rank] - _EPS:
        st.wake[rank] = t
        heapq.heappush(st.heap, (t, rank))


def _commit(st: _State, rank: int, action: Action, x: float) -> None:
    c = st.costs
    gives = provides(action)
    e = x + c.duration(action)
    st.out[rank].append(action)
    st.held[rank] += c.allocates(action) - c.frees(action)
    st.free[rank] = e
    for key in gives:
        st.end[key] = e
        if key[1] == ActionKind.I and not any(p.kind == ActionKind.B for p in action.parts):
            st.pending[rank].append((key[0], ActionKind.W, key[2]))
        for r2 in st.succ_ranks.get(key[:2], ()):
            if r2 != rank:
                _push(st, r2, x)
    if action.kind == ActionKind.W:
        st.pending[rank].remove(gives[0])
    _push(st, rank, e)


def _urgent_w(st: _State, rank: int, x: float, busy: float) -> Key | None:
    """A pending W that would miss its deadline if the rank first spent ``busy`` seconds."""
    if not st.deadlines:
        return None
    best = None
    for key in st.pending[rank]:
        d = st.deadlines.get(key)
        if d is not None and x + busy + st.costs.w[key[0]] > d + _EPS:
            if best is None or d < st.deadlines[best]:
                best = key
    return best


def _decide(st: _State, policy: Policy, rank: int, x: float) -> str | None:
    """Start something on ``rank`` at ``x`` or arrange to wake later; returns an error or None."""
    c = st.costs
    cands = policy.candidates(rank)
    now, blocked, unknown = [], False, False
    next_t = wake = None  # earliest possible start of an admitted candidate; earliest known one
    for a in cands:
        if not policy.admit(rank, a, st.held[rank], st.limit[rank]):
            blocked = True
            continue
        t, known = _ready(st, a, rank, x)
        if known and t <= x + _EPS:
            now.append(a)
            continue
        next_t = t if next_t is None else min(next_t, t)
        if known:
            wake = t if wake is None else min(wake, t)
        else:
            unknown = True
    if now:
        a = policy.pick(rank, now)
        w = _urgent_w(st, rank, x, c.duration(a))
        if w is not None:
            _commit(st, rank, Action(w[0], ActionKind.W, w[2]), x)
        else:
            policy.committed(rank, a)
            _commit(st, rank, a, x)
        return None
    if st.pending[rank]:
        key = _urgent_w(st, rank, x, 0.0) or st.pending[rank][0]
        fits = next_t is None or x + c.w[key[0]] <= next_t + _EPS
        if st.w_mode == "eager":
            fits = fits or unknown
        elif st.w_mode == "lazy":
            fits = next_t is None and not blocked and not cands
        if fits or blocked:
            _commit(st, rank, Action(key[0], ActionKind.W, key[2]), x)
            return None
    if blocked and next_t is None and not st.pending[rank]:
        return f"rank {rank}: activation memory full and nothing left to free it"
    if wake is not None:
        _push(st, rank, wake)
    return None


def run_engine(costs: StageCosts, policy: Policy, *, activation_limit: list[int | None] | None = None,
               deadlines: dict[Key, float] | None = None, w_mode: str = "eager") -> EngineResult:
    """Play the step forward with ``policy`` choosing F/I work.

    The engine plays the step forward in time with the simulator's model
    (``planner.core.simulate``): one compute stream per rank, P2P time between ranks.
    A rank deciding at time ``x`` knows every task that started before ``x`` (it only
    ever starts work at the moment it decides, so decisions are made in time order). It
    then runs, in this order of preference:

    1. a W whose deadline would be missed if the next F/I ran first;
    2. an F/I task ready now (the policy picks which, possibly a fused pair);
    3. a pending W, when it fits in the idle gap before the next F/I can start (known
       arrival), or while the next F/I still waits for inputs not yet computed (``eager``,
       the default: on the benchmark shapes it beats waiting), or when memory
       forces it (a forward is waiting for activation bytes) or nothing else is left;
    4. otherwise it waits for the next arrival.

    ``w_mode`` says when an idle rank runs a pending W: ``fit`` when it ends before the
    next F/I can start (as far as the rank can tell), ``eager`` also while the next
    F/I's inputs are still unknown, ``lazy`` only when forced (memory, deadline, end).
    """
    nr = costs.num_ranks
    st = _State(costs=costs, limit=list(activation_limit) if activation_limit else [None] * nr,
                deadlines=deadlines or {}, free=[0.0] * nr, held=[0] * nr, w_mode=w_mode,
                pending=[[] for _ in range(nr)], out=[[] for _ in range(nr)], wake=[None] * nr)
    st.succ_ranks = _successor_ranks(costs)
    st.p2p = costs.p2p_delays()
    st.deps = {kind: [[(s + off, k) for off, k in needs if 0 <= s + off < costs.num_stages]
                      for s in range(costs.num_stages)] for kind, needs in DEPENDENCIES.items()}
    for r in range(nr):
        _push(st, r, 0.0)
    while st.heap:
        t, r = heapq.heappop(st.heap)
        if st.wake[r] is None or abs(st.wake[r] - t) > _EPS:
            continue
        st.wake[r] = None
        err = _decide(st, policy, r, max(t, st.free[r]))
        if err:
            return EngineResult(None, reason=err)
    left = [r for r in range(nr) if policy.candidates(r) or st.pending[r]]
    if left:
        return EngineResult(None, reason="deadlock: ranks " + ", ".join(map(str, left)) + " cannot finish")
    return EngineResult({r: st.out[r] for r in range(nr)}, makespan=max(st.free, default=0.0))


def _successor_ranks(costs: StageCosts) -> dict[tuple[int, str], list[int]]:
    """(stage, kind) -> ranks running work that needs it (from ``DEPENDENCIES``)."""
    out: dict[tuple[int, str], list[int]] = {}
    for s in range(costs.num_stages):
        for kind, needs in DEPENDENCIES.items():
            for off, dep_kind in needs:
                t = s + off
                if 0 <= t < costs.num_stages:
                    ranks = out.setdefault((t, dep_kind), [])
                    if costs.ranks[s] not in ranks:
                        ranks.append(costs.ranks[s])
    return out
