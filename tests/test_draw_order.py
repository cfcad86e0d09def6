"""[Note: draw order] in solvers.schedule.search.candidates: family orders and greedy list
schedules are drawn in turns (a cut draw holds the first of both, fused greedy first
where overlap pays), and a complete draw is ranked in the canonical order (families,
then greedy), so ties are broken as before."""

from __future__ import annotations

from dataclasses import replace

from planner.core.placement import stage_ranks
from planner.core.stage_costs import StageCosts
from solvers.schedule.search.candidates import clear_memo, drawn, simulated
from solvers.schedule.families.registry import SCHEDULES


def _v_costs(pp: int = 4) -> StageCosts:
    """pp ranks, two stages each in V order, F beside I hiding 30% of the pair."""
    S = 2 * pp
    ranks = tuple(stage_ranks(S, pp, "v"))
    f, i = 1e-3, 2e-3
    fused = {(a, b): 0.7 * (f + i) for a in range(S) for b in range(S) if ranks[a] == ranks[b]}
    return StageCosts(f=(f,) * S, i=(i,) * S, w=(1e-3,) * S, act_bytes=(1 << 20,) * S,
                      act_w_bytes=(1 << 18,) * S, static_bytes=(0,) * S, out_bytes=(1 << 16,) * S,
                      ranks=ranks, fused=fused)


def test_streams_alternate_and_fused_greedy_comes_second():
    costs = _v_costs()
    budget = [8 << 20] * costs.num_ranks
    names = [name for _, name, _ in drawn(costs, 16, budget, {}, list(SCHEDULES), True)]
    assert names[1] == "greedy-fused"                      # right after the first family order
    assert names[0] in ("zbv", "dualpipev") and names[2].startswith(names[0])
    family = [n for n in names if not n.startswith("greedy")]
    greedy = [n for n in names if n.startswith("greedy")]
    turns = 2 * min(len(family), len(greedy))
    assert names[:turns:2] == family[:turns // 2] and names[1:turns:2] == greedy[:turns // 2]  # in turns
    assert names[turns:] == (family + greedy)[turns:] or names[turns:] in (family[turns // 2:], greedy[turns // 2:])


class _After:
    """A wall deadline that expires after ``n`` checks."""

    def __init__(self, n: int) -> None:
        self.left = n

    def expired(self) -> bool:
        self.left -= 1
        return self.left < 0

    def affords(self, units: float) -> bool:
        return True


class _Tight:
    """A wall deadline not yet passed that affords no uncuttable draw (a W-fill, a greedy run)."""

    def expired(self) -> bool:
        return False

    def affords(self, units: float) -> bool:
        return False


def test_a_draw_the_wall_cannot_afford_is_not_started_nor_memoised():
    costs = _v_costs()
    budget = [8 << 20] * costs.num_ranks
    clear_memo()
    short = simulated(costs, 16, budget, {}, list(SCHEDULES), True, wall=_Tight())
    names = [c[0] for c in short]
    assert names[0] == "zbv" and not any("w-fill" in n or n.startswith("greedy") for n in names)  # plain orders only
    again = simulated(costs, 16, budget, {}, list(SCHEDULES), True)
    assert len(again) > 1 and again is not short            # the short list was not memoised
    clear_memo()


def test_a_cut_draw_holds_the_fused_greedy_and_a_complete_one_keeps_canonical_order():
    costs = _v_costs()
    budget = [8 << 20] * costs.num_ranks
    clear_memo()
    cut = simulated(costs, 16, budget, {}, list(SCHEDULES), True, wall=_After(2), have_valid=True)
    assert [c[0] for c in cut][1] == "greedy-fused" and len(cut) == 2
    full = simulated(costs, 16, budget, {}, list(SCHEDULES), True)
    names = [c[0] for c in full]
    first_greedy = next(k for k, n in enumerate(names) if n.startswith("greedy"))
    assert all(n.startswith("greedy") for n in names[first_greedy:])     # families, then greedy
    assert names[first_greedy:first_greedy + 4] == ["greedy", "greedy-fit", "greedy-fused", "greedy-fused-fit"]
    best = min(c[2] for c in full if c[2] is not None)
    assert best <= min(c[2] for c in cut if c[2] is not None)
    clear_memo()


def test_memo_tells_tables_apart_by_their_full_backward():
    v = _v_costs()
    costs = replace(v, f=v.f[:4], i=v.i[:4], w=v.w[:4], act_bytes=v.act_bytes[:4], act_w_bytes=v.act_w_bytes[:4],
                    static_bytes=v.static_bytes[:4], out_bytes=v.out_bytes[:4], ranks=(0, 1, 2, 3), fused={})
    clear_memo()
    plain = simulated(costs, 16, None, {}, ["1f1b"], False)
    assert simulated(costs, 16, None, {}, ["1f1b"], False) is plain  # a memo hit
    cheap_b = simulated(replace(costs, b=(2.4e-3,) * 4), 16, None, {}, ["1f1b"], False)
    assert cheap_b[0][2] < plain[0][2]                     # its B actions are cheaper: not the memo's
    clear_memo()
