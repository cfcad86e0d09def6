"""Greedy bubble filling: keep each rank's F/I order, move W tasks into idle gaps.

Any schedule (1F1B, interleaved, a zero-bubble order, a fused one) is first split:
each full backward ``B`` becomes its input-gradient ``I`` and every W is taken out;
fused ``(F;B)`` pairs keep their F and I part together. The event engine
(``solvers.schedule.engines.list_engine``) then replays the F/I order with the real per-stage costs and
puts each W back where the rank would otherwise idle (it fits before the next F/I can
start), where memory forces it (a forward needs the bytes the W's ``act_w_bytes`` still
hold) or where its deadline forces it; leftovers run at the end, before the optimizer
step. This is the zero-bubble idea (Qi et al., ICLR 2024, section 3: W fills bubbles)
applied to heterogeneous stages: gaps come from the simulated timeline, not from a
uniform F = B = W picture.
"""

from __future__ import annotations

from planner.core.schedule import OVERLAP, Action, ActionKind, Key, Schedule
from planner.core.stage_costs import StageCosts
from solvers.schedule.engines.list_engine import run_engine

__all__ = ["fill_w", "split_order"]


def split_order(schedule: Schedule) -> dict[int, list[Action]]:
    """Each rank's F/I order: B -> I, W removed, fused (F;B) -> (F;I)."""
    out: dict[int, list[Action]] = {}
    for r, acts in schedule.items():
        row = []
        for a in acts:
            if a.kind == ActionKind.W:
                continue
            if a.kind == ActionKind.B:
                row.append(Action(a.stage, ActionKind.I, a.microbatch))
            elif a.kind == OVERLAP and a.sub[1].kind == ActionKind.B:
                fw, bw = a.sub
                row.append(Action.fused(fw, Action(bw.stage, ActionKind.I, bw.microbatch)))
            else:
                row.append(a)
        out[r] = row
    return out


class _FixedOrder:
    """Policy: run each rank's F/I actions in the given order. A fused pair that was (F;B) is
    offered split, (F;I) with its W free to move, and whole as a fallback: the split pair
    holds the W's share of activations past the pair (``StageCosts.memory_order``), so where
    that does not fit the pair keeps its W inside, as Megatron's combined 1F1B runs it."""

    def __init__(self, schedule: Schedule, costs: StageCosts) -> None:
        self.order = split_order(schedule)
        self.whole = {r: [a if a.kind == OVERLAP and a.sub[1].kind == ActionKind.B else None for a in acts
                          if a.kind != ActionKind.W] for r, acts in schedule.items()}
        self.ptr = {r: 0 for r in self.order}
        self.costs = costs

    def candidates(self, rank: int) -> list[Action]:
        row = self.order.get(rank, [])
        k = self.ptr.get(rank, 0)
        if k >= len(row):
            return []
        whole = self.whole[rank][k]
        return [row[k]] if whole is None else [row[k], whole]

    def admit(self, rank: int, action: Action, held: int, limit: int | None) -> bool:
        return limit is None or held + self.costs.allocates(action) <= limit

    def committed(self, rank: int, action: Action) -> None:
        self.ptr[rank] += 1

    def pick(self, rank: int, ready: list[Action]) -> Action:
        return ready[0]


def fill_w(schedule: Schedule, costs: StageCosts, *, activation_limit: list[int | None] | None = None,
           deadlines: dict[Key, float] | None = None,
           w_mode: str = "eager") -> Schedule | None:
    """``schedule`` with W tasks re-placed into gaps; None when its F/I order cannot meet
    ``activation_limit`` (activation bytes per rank) even with every W run as early as possible."""
    result = run_engine(costs, _FixedOrder(schedule, costs),
                        activation_limit=activation_limit, deadlines=deadlines, w_mode=w_mode)
    return result.schedule
