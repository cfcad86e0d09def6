"""DeepSeek's DualPipeV order, step for step.

The order of ``DualPipeV.step()`` in deepseek-ai/DualPipe (``dualpipe/dualpipev.py``), as
torch re-implements it in ``ScheduleDualPipeV._calculate_single_rank_operations``
(torch/distributed/pipelining/schedules.py, torch 2.13): p ranks, two stages each in V
placement (rank r holds stages r and 2p - 1 - r), eight steps per rank (``_rank_order``).
Microbatch indices count per (stage, kind), a full B advancing the I and W counters both.
DualPipeV needs ``M >= 2p`` (torch raises otherwise). Its bubble on uniform costs with no
overlap is checked against DeepSeek's formula in ``tests/test_dualpipev_exact.py``.
"""

from __future__ import annotations

from planner.core.errors import InfeasibleError
from planner.core.placement import stage_ranks
from planner.core.schedule import Action, ActionKind, Schedule

__all__ = ["dualpipev_exact"]

_F, _I, _W, _B = ActionKind.F, ActionKind.I, ActionKind.W, ActionKind.B


class _Rank:
    """One rank's order as it is built: per-(stage, kind) counters and the queue of pending Ws."""

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self.count: dict[tuple[int, ActionKind], int] = {}
        self.pending_w: list[tuple[int, int]] = []

    def _next(self, stage: int, kind: ActionKind) -> int:
        return self.count.get((stage, kind), 0)

    def _bump(self, stage: int, kind: ActionKind) -> None:
        self.count[(stage, kind)] = self._next(stage, kind) + 1

    def act(self, stage: int, kind: ActionKind) -> Action:
        """Append (and return) the next action of ``kind`` on ``stage``; a full B counts as I and W."""
        m = self._next(stage, _I if kind == _B else kind)
        action = Action(stage, kind, m)
        if kind == _B:
            self._bump(stage, _I)
            self._bump(stage, _W)
        else:
            if kind == _I:
                self.pending_w.append((stage, m))
            self._bump(stage, kind)
        self.actions.append(action)
        return action

    def fused(self, forward_stage: int, backward_stage: int) -> None:
        """(F of ``forward_stage``; B of ``backward_stage``) as one OVERLAP_F_B action."""
        f = Action(forward_stage, _F, self._next(forward_stage, _F))
        b = Action(backward_stage, _B, self._next(backward_stage, _I))
        self._bump(forward_stage, _F)
        self._bump(backward_stage, _I)
        self._bump(backward_stage, _W)
        self.actions.append(Action.fused(f, b))

    def pending(self) -> None:
        """The oldest queued W, if any."""
        if self.pending_w:
            stage, m = self.pending_w.pop(0)
            self.actions.append(Action(stage, _W, m))
            self._bump(stage, _W)


def _rank_order(p: int, r: int, m: int, first: int, second: int) -> list[Action]:
    """Rank r's eight steps (stages ``first`` = r and ``second`` = 2p - 1 - r):

    1. ``2(p - r - 1)`` forwards of the first stage;
    2. ``r + 1`` pairs: forward of the first stage, forward of the second;
    3. ``p - r - 1`` times: input-gradient of the second stage, one pending W, its forward;
    4. ``M - 2p + r + 1`` times: (F first, B second) fused, then (F second, B first) fused; the
       last rank runs its first pair unfused (a smaller bubble);
    5. ``p - r - 1`` times: B of the second stage, then (F second, B first) fused;
    6. ``r + 1`` times: backward of the second stage, then of the first; from the middle one
       on (odd ranks: before the second stage's, even ranks: before the first stage's) as an
       input-gradient whose W is queued (zero bubble), before that as a full B;
    7. ``p - r - 1`` times: one pending W, then the first stage's backward (I when step 6
       switched to zero bubble, else B);
    8. ``r + 1`` pending Ws.
    """
    o = _Rank()
    for _ in range(2 * (p - r - 1)):                       # 1: F0
        o.act(first, _F)
    for _ in range(r + 1):                                 # 2: F0 F1
        o.act(first, _F)
        o.act(second, _F)
    for _ in range(p - r - 1):                             # 3: I1 W F1
        o.act(second, _I)
        o.pending()
        o.act(second, _F)
    for k in range(m - 2 * p + r + 1):                     # 4: (F0;B1) (F1;B0)
        if k == 0 and r == p - 1:
            o.act(first, _F)
            o.act(second, _B)
        else:
            o.fused(first, second)
        o.fused(second, first)
    for _ in range(p - r - 1):                             # 5: B1 (F1;B0)
        o.act(second, _B)
        o.fused(second, first)
    zb = False
    for k in range(r + 1):                                 # 6: B1 B0, zero bubble from the middle
        if k == (r + 1) // 2 and r % 2 == 1:
            zb = True
        o.act(second, _I if zb else _B)
        if k == (r + 1) // 2 and r % 2 == 0:
            zb = True
        o.act(first, _I if zb else _B)
    for _ in range(p - r - 1):                             # 7: W B0
        o.pending()
        o.act(first, _I if zb else _B)
    for _ in range(r + 1):                                 # 8: W
        o.pending()
    return o.actions


def dualpipev_exact(pp: int, microbatches: int) -> Schedule:
    """DeepSeek's DualPipeV order for ``pp`` ranks (see the module docstring)."""
    if microbatches < 2 * pp:
        raise InfeasibleError(f"DualPipeV needs at least 2 x pp = {2 * pp} microbatches, got {microbatches} "
                              "(deepseek-ai/DualPipe dualpipev.py); raise --microbatches or use --schedule zbv")
    ranks = stage_ranks(2 * pp, pp, "v")
    out: Schedule = {}
    for r in range(pp):
        first, second = (s for s in range(2 * pp) if ranks[s] == r)
        out[r] = _rank_order(pp, r, microbatches, first, second)
    return out
