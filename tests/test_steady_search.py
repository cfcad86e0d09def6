"""Orders and local search for the steady-state period (issue 19, [Note: steady tail],
[Note: period search])."""

from __future__ import annotations

import random

import pytest

from planner.core.costs import P2PCost
from planner.core.schedule import ActionKind
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from planner.core.steady import steady_state
from planner.core.validate import validate
from solvers.schedule.search.candidates import limits
from solvers.schedule.families.generators import one_f_one_b
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.schedule.search.search import best_schedule
from solvers.schedule.search.steady_order import base_counts, steady_lower_bound, steady_order, steady_orders
from solvers.schedule.search.steady_search import improve_period
from test_steady import zb_costs

ZB_WORK = 24 * (18.52 + 18.09 + 9.34) * 1e-3


def _hetero(p: int, seed: int) -> StageCosts:
    rnd = random.Random(seed)
    k = [rnd.uniform(0.6, 1.4) for _ in range(p)]
    act = [int(2**30 * rnd.uniform(0.7, 1.3)) for _ in range(p)]
    return StageCosts(f=tuple(0.010 * x for x in k), i=tuple(0.011 * x for x in k), w=tuple(0.009 * x for x in k),
                      act_bytes=tuple(act), act_w_bytes=tuple(a * 2 // 5 for a in act), static_bytes=(0,) * p,
                      out_bytes=(2**24,) * p, ranks=tuple(range(p)), p2p=P2PCost(latency_s=2e-5, bandwidth=5e10))


def test_zero_bubble_setting_reaches_the_steady_bound_and_the_papers_bubble():
    c, m = zb_costs(8), 24
    budget = MemoryLimit(microbatches=16).activation_limit(c)  # 2p
    bound = steady_lower_bound(c, m)
    # last rank: its work plus the wait its 24 W cannot fill: 7 x (F + I + 1.2 ms) + W - 24 W
    assert bound == pytest.approx(ZB_WORK + 7 * (18.52 + 18.09 + 1.2) * 1e-3 + 9.34e-3 - 24 * 9.34e-3)
    assert base_counts(c, m) == ([15, 13, 11, 9, 7, 5, 3, 1], [1, 5, 9, 13, 17, 21, 24, 24])
    order = steady_order(c, m, warm=[15, 13, 11, 9, 7, 5, 3, 1], tail=[1, 5, 9, 13, 17, 21, 24, 24],
                         activation_limit=budget)
    assert validate(order, c, num_microbatches=m) == []
    assert limits(order, c, budget, {})[1] == "valid"  # within 2p of activations on every rank
    st = steady_state(order, c, m)
    assert st.period_s == pytest.approx(bound, rel=1e-9)
    assert 1 - ZB_WORK / st.period_s <= 0.0433  # Qi et al., ICLR 2024: ZB-2p without a global barrier
    # the last rank holds all 24 W back to the end of its step; rank 0 holds one
    assert [a.kind for a in order[7][-24:]] == [ActionKind.W] * 24
    assert [a.kind for a in order[0][-2:]] == [ActionKind.I, ActionKind.W]


def test_steady_objective_on_the_zero_bubble_setting_is_at_the_bound():
    c, m = zb_costs(8), 24
    ch = best_schedule(c, microbatches=m, memory_limit=MemoryLimit(microbatches=16), objective="steady",
                       time_limit=1.0)
    assert ch.name.startswith(("steady-tail", "zb-greedy"))  # an order built for the period, or Zero Bubble's own
    assert steady_state(ch.schedule, c, m).period_s == pytest.approx(steady_lower_bound(c, m), rel=1e-9)
    assert ch.step_time == pytest.approx(simulate(ch.schedule, c).step_time)  # the makespan is still reported


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_order_beats_the_steady_lower_bound(seed):
    c, m = _hetero(6, seed), 18
    budget = MemoryLimit(microbatches=12).activation_limit(c)
    bound = steady_lower_bound(c, m)
    orders = [s for _, s in steady_orders(c, m, budget)] + [one_f_one_b(6, m, split_w=True)]
    assert orders
    for order in orders:
        assert validate(order, c, num_microbatches=m) == []
        assert steady_state(order, c, m).period_s >= bound * (1 - 1e-9)


def test_period_search_improves_keeps_limits_and_is_reproducible():
    c, m = _hetero(6, 3), 18
    budget = MemoryLimit(microbatches=6).activation_limit(c)  # 1p: the start has room to improve
    start = one_f_one_b(6, m, split_w=True)
    runs = [improve_period(start, c, m, activation_limit=budget, work=300_000, seed=5) for _ in range(2)]
    a, b = runs
    assert a.schedule == b.schedule and a.period_s == b.period_s  # same inputs and seed, same order
    assert a.period_s < a.start_period_s == steady_state(start, c, m).period_s
    assert a.period_s == pytest.approx(steady_state(a.schedule, c, m).period_s)
    assert validate(a.schedule, c, num_microbatches=m) == []
    assert limits(a.schedule, c, budget, {})[1] == "valid"
    assert a.moves > 0 and not a.cut


def test_period_search_with_no_work_returns_the_start():
    c, m = zb_costs(4), 8
    start = one_f_one_b(4, m, split_w=True)
    found = improve_period(start, c, m, activation_limit=None, work=0)
    assert found.schedule == start and found.moves == 0 and found.period_s == found.start_period_s


def test_steady_orders_only_for_one_stage_per_rank():
    c = zb_costs(8)
    two = StageCosts(f=c.f, i=c.i, w=c.w, act_bytes=c.act_bytes, act_w_bytes=c.act_w_bytes,
                     static_bytes=c.static_bytes, out_bytes=c.out_bytes, ranks=(0, 1, 2, 3, 0, 1, 2, 3), p2p=c.p2p)
    assert list(steady_orders(two, 16, None)) == []
    work = 2 * 16 * (c.f[0] + c.i[0] + c.w[0])
    assert steady_lower_bound(two, 16) == pytest.approx(work)  # the busiest rank's work only


def test_limits_names_a_deadlock_instead_of_failing():
    c = zb_costs(2)
    sched = one_f_one_b(2, 2, split_w=True)
    sched[0] = [a for a in sched[0] if a.kind != ActionKind.F] + [a for a in sched[0] if a.kind == ActionKind.F]
    t, why = limits(sched, c, None, {})
    assert t is None and "predecessor" in why


def test_period_search_stops_at_the_wall_deadline():
    import time

    from solvers.schedule.search.budget import WallBudget

    c, m = _hetero(6, 3), 18
    start = one_f_one_b(6, m, split_w=True)
    wall = WallBudget(1e-3, start=time.perf_counter() - 1.0).phase("polish")  # long past its deadline
    found = improve_period(start, c, m, activation_limit=None, work=10**9, deadline=wall)
    assert found.cut and found.moves == 0 and found.schedule == start
    assert "polish" in wall.budget.cuts
