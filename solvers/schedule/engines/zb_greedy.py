"""Zero Bubble's automatic heuristic on real stage costs, one stage per rank.

Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024), section 3 ("automatic
pipeline scheduling", heuristic algorithm), re-derived from the paper's text (the rules
at ``zb_greedy``). The three knobs give eight variants (``zb_greedy_orders``); the search
keeps the fastest as the simulator times it. Unlike ``solvers.schedule.engines.w_fill``
(a W wherever a rank would idle), a W here waits when a gap is shorter than it and other
ranks have idled more: the last stage then keeps feeding input-gradients back, and the
Ws it defers fill the step's tail while the gradients travel to the first stage (an
example in docs/search-peers.md). Only one stage per rank (loop placement, vpp 1); fused
pairs and full backwards are left to the other candidates.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import product

from planner.core.schedule import Action, ActionKind, Schedule
from planner.core.stage_costs import StageCosts

__all__ = ["ZbKnobs", "zb_greedy", "zb_greedy_orders"]

_F, _I, _W = ActionKind.F, ActionKind.I, ActionKind.W
_EPS = 1e-12


@dataclass(frozen=True, kw_only=True)
class ZbKnobs:
    """The heuristic's three binary hyperparameters (rules 1-3 at ``zb_greedy``)."""

    fill_warmup: bool
    """Run one more warm-up forward into a gap shorter than a forward before the first
    input-gradient, delaying it by less than a forward."""
    hold_forward: bool
    """Hold back a forward of a stage two or more ahead of the next one when it would
    delay the stage's next input-gradient."""
    fill_every_gap: bool
    """Put a W into every gap shorter than a W; otherwise only where leaving the gap would
    make this rank's total bubble the largest."""

    @property
    def label(self) -> str:
        """``zb-greedy-abc``, one digit per knob in field order."""
        return "zb-greedy-" + "".join(str(int(v)) for v in (self.fill_warmup, self.hold_forward,
                                                           self.fill_every_gap))


class _Build:
    """The step as it is placed: per stage its clock, counters, memory and row."""

    def __init__(self, costs: StageCosts, m: int, limit: list[int] | None) -> None:
        S = costs.num_stages
        self.c, self.m, self.S = costs, m, S
        self.limit = [limit[costs.ranks[s]] if limit else None for s in range(S)]
        self.hop = [costs.p2p_time(s) for s in range(S - 1)]
        self.clock = [0.0] * S
        self.idle = [0.0] * S
        self.most_idle = 0.0
        """Largest ``idle`` of any stage (idle time only grows)."""
        self.held = [0] * S
        self.n = {k: [0] * S for k in (_F, _I, _W)}
        self.end: dict[ActionKind, list[list[float]]] = {_F: [[] for _ in range(S)], _I: [[] for _ in range(S)]}
        self.rows: list[list[Action]] = [[] for _ in range(S)]

    def ready(self, s: int, kind: ActionKind) -> float:
        """When the next task of ``kind`` on ``s`` has its input (for F and I; W: now)."""
        k = self.n[kind][s]
        if kind == _F:
            return self.end[_F][s - 1][k] + self.hop[s - 1] if s > 0 else 0.0
        if kind == _I:
            return self.end[_I][s + 1][k] + self.hop[s] if s + 1 < self.S else self.end[_F][s][k]
        return self.clock[s]

    def place(self, s: int, kind: ActionKind) -> None:
        c, k = self.c, self.n[kind][s]
        start = max(self.clock[s], self.ready(s, kind))
        if self.rows[s] and start > self.clock[s]:
            self.idle[s] += start - self.clock[s]
            self.most_idle = max(self.most_idle, self.idle[s])
        self.clock[s] = start + c.kind_time(kind, s)
        if kind != _W:
            self.end[kind][s].append(self.clock[s])
        self.held[s] += c.allocated(kind, s) - c.released(kind, s)
        self.n[kind][s] += 1
        self.rows[s].append(Action(s, kind, k))

    def pending_w(self, s: int) -> bool:
        """Whether ``s`` has an input-gradient whose W has not run."""
        return self.n[_W][s] < self.n[_I][s]

    def fits_forward(self, s: int) -> bool:
        """Whether a forward fits the memory budget once every pending W has run."""
        b = self.limit[s]
        if b is None:
            return True
        w_held = (self.n[_I][s] - self.n[_W][s]) * self.c.act_w_bytes[s]
        return self.held[s] - w_held + self.c.act_bytes[s] <= b


def _ws_before(st: _Build, s: int, kind: ActionKind, knobs: ZbKnobs) -> None:
    """Ws before the next ``kind`` task of ``s`` (rules 2 and 4, first-stage flush).

    [Note: first stage's tail] An input-gradient of the first stage feeds no other rank,
    only its own W; so once the first stage's forwards are done, its pending Ws run
    before its next input-gradient: nothing waits on the order, and the activations the
    input-gradient frees are not needed any more."""
    c = st.c
    if kind == _F:
        while st.limit[s] is not None and st.held[s] + c.act_bytes[s] > st.limit[s] and st.pending_w(s):
            st.place(s, _W)
    if kind == _I and s == 0 and st.n[_F][0] == st.m:  # [Note: first stage's tail]
        while st.pending_w(s):
            st.place(s, _W)
    ready = st.ready(s, kind)
    while st.pending_w(s) and st.clock[s] + c.w[s] <= ready + _EPS:
        st.place(s, _W)
    gap = ready - st.clock[s]
    if st.pending_w(s) and gap > _EPS and (knobs.fill_every_gap or st.idle[s] + gap > st.most_idle + _EPS):
        st.place(s, _W)


def _warmup(st: _Build, knobs: ZbKnobs) -> None:
    """Microbatch 0 down and back, with the extra forwards of rule 1 before its gradient."""
    c, S = st.c, st.S
    for s in range(S):
        st.place(s, _F)
    extra, arrive = [0] * S, st.end[_F][S - 1][0]
    for s in range(S - 1, -1, -1):
        t, held = st.clock[s], st.held[s]
        while st.n[_F][s] + extra[s] < st.m and (st.limit[s] is None or held + c.act_bytes[s] <= st.limit[s]):
            if (t >= arrive - _EPS) if knobs.fill_warmup else (t + c.f[s] > arrive + _EPS):
                break
            t, held, extra[s] = t + c.f[s], held + c.act_bytes[s], extra[s] + 1
        if s > 0:
            arrive = max(t, arrive) + c.i[s] + st.hop[s - 1]
    for s in range(1, S):  # rule 3: each stage stays ahead of the next
        extra[s] = min(extra[s], max(0, extra[s - 1] - 1))
    for s in range(S):
        for _ in range(extra[s]):
            st.place(s, _F)
    for s in range(S - 1, -1, -1):
        st.place(s, _I)


def _forwards_this_round(st: _Build, knobs: ZbKnobs) -> list[bool]:
    """Which stages run a forward in this round (rule 3), before the input-gradient sweep."""
    c, S, nf = st.c, st.S, st.n[_F]
    run = [nf[s] < st.m and st.fits_forward(s) for s in range(S)]
    for s in range(S - 1):
        if run[s] and knobs.hold_forward and nf[s] >= nf[s + 1] + 2:
            nxt = st.clock[s + 1] + (c.f[s + 1] if run[s + 1] else 0.0) + c.i[s + 1] + st.hop[s]
            run[s] = st.clock[s] + c.f[s] <= nxt + _EPS
    changed = True
    while changed:  # a stage never gets further ahead of the next, nor catches up with the one before
        changed = False
        for s in range(S):
            keep = run[s] and (s + 1 == S or run[s + 1] or nf[s + 1] == st.m) and \
                (s == 0 or nf[s - 1] + run[s - 1] > nf[s])
            changed, run[s] = changed or keep != run[s], keep
    return run


def _applies(costs: StageCosts) -> bool:
    """Whether stage r runs on rank r alone (one stage per rank, in order)."""
    return list(costs.ranks) == list(range(costs.num_stages))


def zb_greedy(costs: StageCosts, microbatches: int, *, activation_limit: list[int] | None,
              knobs: ZbKnobs) -> Schedule | None:
    """The heuristic's order for ``costs`` with ``knobs``; None when a forward never fits
    ``activation_limit`` (bytes per rank) or the stages are not one per rank.

    1. warm-up: each stage runs as many forwards as its memory allows before the first
       input-gradient reaches it, short of delaying it; whether one more forward may fill
       the last small gap (and delay that input-gradient by less than a forward) is a knob;
    2. then one forward and one input-gradient in turn. A W fills a gap at least as long as
       itself; a shorter gap gets a W too when leaving it idle would make this rank's total
       bubble the largest of all ranks (or always, a knob); a W also runs when a forward
       needs the memory its activations still hold;
    3. stage r always has at least one more forward done than stage r + 1; when it is two or
       more ahead it may hold one back where running it would delay its next
       input-gradient (a knob);
    4. a stage whose forwards and input-gradients are done runs its remaining Ws.

    The builder plays one step microbatch by microbatch, a forward sweep down the stages
    and an input-gradient sweep back up, so each task's inputs are placed before it and
    its start is exact in the simulator's model (``planner.core.simulate``: one stream per
    rank, P2P time per boundary).
    """
    if not _applies(costs):
        return None
    st = _Build(costs, microbatches, activation_limit)
    if any(b is not None and b < a for b, a in zip(st.limit, costs.act_bytes)):
        return None
    _warmup(st, knobs)
    for _ in range(1, microbatches):  # round k: forwards, then microbatch k's input-gradients
        run = _forwards_this_round(st, knobs)
        for s in range(st.S):
            if run[s]:
                _ws_before(st, s, _F, knobs)
                st.place(s, _F)
        for s in range(st.S - 1, -1, -1):
            _ws_before(st, s, _I, knobs)
            st.place(s, _I)
    for s in range(st.S):
        while st.pending_w(s):
            st.place(s, _W)
    return {costs.ranks[s]: row for s, row in enumerate(st.rows)}


def zb_greedy_orders(costs: StageCosts, microbatches: int,
                     activation_limit: list[int] | None) -> Iterator[tuple[str, Schedule | str]]:
    """All eight variants as ``(label, schedule)``, or ``(label, reason)`` when one does not
    apply; none unless stage r runs on rank r alone."""
    if not _applies(costs):
        return
    for bits in product((True, False), repeat=3):
        knobs = ZbKnobs(fill_warmup=bits[0], hold_forward=bits[1], fill_every_gap=bits[2])
        sched = zb_greedy(costs, microbatches, activation_limit=activation_limit, knobs=knobs)
        yield knobs.label, sched if sched is not None else "a forward does not fit the memory budget"
