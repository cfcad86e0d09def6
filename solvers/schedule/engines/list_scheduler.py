"""Cost-aware greedy schedule: zero-bubble style list scheduling under a memory budget.

Each rank, whenever it is free, runs the ready task it prefers (``solvers.schedule.engines.list_engine``
does the timing, W filling, memory and deadlines):

- input-gradients before forwards (they free memory and lie on the critical path),
  the oldest microbatch first, the later stage first among equals;
- a forward only when the rank's activation budget admits it. With several stages per
  rank a microbatch entering the rank reserves the bytes of all its stages there, so a
  forward of a later chunk can never be starved by newer microbatches (no deadlock);
- with ``fuse=True`` a ready forward and a ready input-gradient of different
  microbatches run as one OVERLAP_F_B action when that is cheaper than running them
  one after the other (DualPipe-style overlap).

Per stage, forwards and input-gradients run in microbatch order. With a budget of
p - r microbatches on rank r this reproduces ZB-H1, with 2(p - r) - 1 ZB-H2 (Qi et al.,
ICLR 2024, section 3), on V placement ZB-V; the same rules adapt to unequal stages.
"""

from __future__ import annotations

from planner.core.costs import P2PCost
from planner.core.schedule import OVERLAP, Action, ActionKind, Key, Schedule
from planner.core.stage_costs import StageCosts
from solvers.schedule.engines.list_engine import EngineResult, run_engine
from solvers.schedule.engines.memory_limit import rank_activation

__all__ = ["list_schedule", "unit_costs", "unit_order", "rank_activation", "fused_pairs"]


class _Greedy:
    """Policy: input-gradient first, oldest microbatch first, forwards under the budget."""

    def __init__(self, costs: StageCosts, microbatches: int, fuse: bool) -> None:
        self.costs = costs
        self.m = microbatches
        self.fuse = fuse
        self.stages_of = [[s for s in range(costs.num_stages) if costs.ranks[s] == r]
                          for r in range(costs.num_ranks)]
        self.next_f = [0] * costs.num_stages
        self.next_i = [0] * costs.num_stages
        self.total = rank_activation(costs)
        self.reserved = [0] * costs.num_ranks
        self.entered = [-1] * costs.num_ranks
        """Newest microbatch that entered each rank (microbatches enter in order)."""

    def candidates(self, rank: int) -> list[Action]:
        out = []
        for s in reversed(self.stages_of[rank]):
            if self.next_i[s] < self.next_f[s]:
                out.append(Action(s, ActionKind.I, self.next_i[s]))
        for s in reversed(self.stages_of[rank]):
            if self.next_f[s] < self.m:
                out.append(Action(s, ActionKind.F, self.next_f[s]))
        return out

    def admit(self, rank: int, action: Action, held: int, limit: int | None) -> bool:
        if limit is None or action.kind != ActionKind.F or action.microbatch <= self.entered[rank]:
            return True
        return held + self.reserved[rank] + self.total[rank] <= limit

    def committed(self, rank: int, action: Action) -> None:
        for p in action.parts:
            if p.kind == ActionKind.I:
                self.next_i[p.stage] += 1
                continue
            self.next_f[p.stage] += 1
            act = self.costs.act_bytes[p.stage]
            if p.microbatch > self.entered[rank]:
                self.entered[rank] = p.microbatch
                self.reserved[rank] += self.total[rank] - act
            else:
                self.reserved[rank] -= act

    def pick(self, rank: int, ready: list[Action]) -> Action:
        def order(a: Action) -> tuple[int, int]:
            return (a.microbatch, -a.stage)

        bwd = min((a for a in ready if a.kind == ActionKind.I), key=order, default=None)
        fwd = min((a for a in ready if a.kind == ActionKind.F), key=order, default=None)
        if self.fuse and bwd and fwd and bwd.microbatch != fwd.microbatch:
            c = self.costs
            if c.fused_time(fwd.stage, bwd.stage) < c.f[fwd.stage] + c.i[bwd.stage] - 1e-15:
                return Action.fused(fwd, bwd)
        return bwd or fwd  # type: ignore[return-value]


def list_schedule(costs: StageCosts, microbatches: int, *, activation_limit: list[int | None] | None = None,
                  fuse: bool = False, deadlines: dict[Key, float] | None = None, w_mode: str = "eager") -> EngineResult:
    """Greedy schedule of ``microbatches`` under per-rank activation budgets (bytes)."""
    return run_engine(costs, _Greedy(costs, microbatches, fuse), activation_limit=activation_limit,
                      deadlines=deadlines, w_mode=w_mode)


def unit_costs(pp: int, ranks: list[int], *, fused_share: float = 0.75) -> StageCosts:
    """F = I = W = 1 per stage, one byte of activation, no P2P time: the uniform picture the
    classic generators are drawn for. Fused pairs take ``fused_share`` of F + I.

    The byte is held until W (``act_w_bytes = act_bytes``): a microbatch counts against
    the in-flight limit until its weight-gradient is done. Counting it only until I would
    let the unit picture defer every W to the end of the step, an order whose real
    weight-gradient memory (M microbatches' worth) fits no realistic limit; where W
    should land under real costs and memory is decided later by ``solvers.schedule.engines.w_fill``."""
    S = len(ranks)
    fused = {(a, b): 2 * fused_share for a in range(S) for b in range(S) if ranks[a] == ranks[b]}
    return StageCosts(f=(1.0,) * S, i=(1.0,) * S, w=(1.0,) * S, act_bytes=(1,) * S,
                      act_w_bytes=(1,) * S, static_bytes=(0,) * S, out_bytes=(0,) * S,
                      ranks=tuple(ranks), fused=fused, p2p=P2PCost(latency_s=0.0))


def unit_order(pp: int, microbatches: int, ranks: list[int], inflight: list[int], *,
               fuse: bool = False) -> Schedule:
    """The greedy order for unit costs with ``inflight[r]`` microbatches of rank r's activations."""
    costs = unit_costs(pp, ranks)
    per_rank = [ranks.count(r) for r in range(pp)]
    res = list_schedule(costs, microbatches, activation_limit=[k * n for k, n in zip(inflight, per_rank)],
                        fuse=fuse)
    assert res.schedule is not None, res.reason  # >= 1 microbatch per rank always progresses
    return res.schedule


def fused_pairs(schedule: Schedule) -> int:
    """Number of OVERLAP_F_B actions in ``schedule``."""
    return sum(a.kind == OVERLAP for acts in schedule.values() for a in acts)
