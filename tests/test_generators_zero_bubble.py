"""Schedule generators and the W-filling pass on uniform and heterogeneous stage costs."""

from __future__ import annotations

import pytest

from planner.core.schedule import OVERLAP
from planner.core.simulate import simulate
from planner.core.validate import validate
from schedule_fixtures import make_costs
from solvers.partition.inflight import max_in_flight
from solvers.schedule.engines.list_scheduler import list_schedule
from solvers.schedule.search.lower_bound import step_lower_bound
from solvers.schedule.engines.memory_limit import rank_activation
from solvers.schedule.search.search import SCHEDULES, generate
from solvers.schedule.engines.w_fill import fill_w
from solvers.schedule.families.zero_bubble import zb_h1, zb_h2

SHAPES = [  # (name, pp, vpp, microbatches, placement)
    *[(n, pp, 1, m, "loop") for n in ("gpipe", "1f1b", "1f1b-overlap", "zb-h1", "zb-h2")
      for pp, m in ((2, 3), (4, 8), (4, 5), (6, 13))],
    *[(n, pp, vpp, m, "loop") for n in ("interleaved", "interleaved-overlap")
      for pp, vpp, m in ((2, 2, 4), (4, 2, 8), (3, 3, 9), (4, 2, 4))],
    *[(n, pp, 2, m, "v") for n in ("zbv", "dualpipev-list") for pp, m in ((2, 4), (4, 8), (4, 5), (3, 10))],
    *[("dualpipev", pp, 2, m, "v") for pp, m in ((2, 4), (4, 8), (4, 11), (3, 10))],  # DeepSeek's needs M >= 2 pp
]


@pytest.mark.parametrize("hetero", [False, True], ids=["uniform", "hetero"])
@pytest.mark.parametrize("name,pp,vpp,m,placement", SHAPES)
def test_generator_and_fill_are_valid(name, pp, vpp, m, placement, hetero):
    costs = make_costs(pp, vpp, hetero=hetero, placement=placement, fused_share=0.8, seed=pp * m)
    order = generate(name, pp=pp, vpp=vpp, microbatches=m)
    assert validate(order, costs, num_microbatches=m) == []
    filled = fill_w(order, costs)
    assert filled is not None and validate(filled, costs, num_microbatches=m) == []
    lb = step_lower_bound(costs, m)
    assert simulate(filled, costs).step_time >= lb * (1 - 1e-9)
    assert simulate(order, costs).step_time >= lb * (1 - 1e-9)


@pytest.mark.parametrize("pp,m", [(4, 8), (8, 16), (5, 11)])
def test_zero_bubble_in_flight_limits(pp, m):
    """ZB-H1 keeps 1F1B's p - r in flight on rank r, ZB-H2 at most 2(p - r) - 1 (Qi et al.)."""
    h1, h2 = max_in_flight(zb_h1(pp, m), pp), max_in_flight(zb_h2(pp, m), pp)
    assert all(h1[r] <= min(pp - r, m) for r in range(pp))
    assert all(h2[r] <= min(2 * (pp - r) - 1, m) for r in range(pp))
    assert h2[0] == min(2 * pp - 1, m)


@pytest.mark.parametrize("pp,vpp,m", [(4, 2, 8), (3, 3, 9), (8, 2, 32)])
def test_interleaved_overlap_is_megatrons_ep_overlap_order(pp, vpp, m):
    """Same F order and B order as plain interleaved 1F1B, one more warm-up forward, then
    every steady step one OVERLAP_F_B of two different microbatches (Megatron's combined
    1F1B with virtual stages)."""
    plain, fused = generate("interleaved", pp=pp, vpp=vpp, microbatches=m), \
        generate("interleaved-overlap", pp=pp, vpp=vpp, microbatches=m)
    for r in range(pp):
        def order(acts, kind):
            return [p for a in acts for p in a.parts if p.kind == kind]
        assert order(fused[r], "F") == order(plain[r], "F") and order(fused[r], "B") == order(plain[r], "B")
        warm = min(2 * (pp - r - 1) + (vpp - 1) * pp + 1, m * vpp)
        assert all(a.kind == "F" for a in fused[r][:warm])
        steady = fused[r][warm:warm + m * vpp - warm]
        assert all(a.kind == OVERLAP and a.sub[0].microbatch != a.sub[1].microbatch for a in steady)
        assert sum(a.kind == OVERLAP for a in fused[r]) == m * vpp - warm


def test_dualpipev_fuses_and_zbv_uses_v_placement():
    d = generate("dualpipev", pp=4, vpp=2, microbatches=8)
    assert any(a.kind == OVERLAP for acts in d.values() for a in acts)
    z = generate("zbv", pp=4, vpp=2, microbatches=8)
    assert {a.stage for a in z[0]} == {0, 7}


def test_zb_h2_beats_1f1b_on_uniform_costs():
    costs = make_costs(8)
    t_1f1b = simulate(generate("1f1b", pp=8, vpp=1, microbatches=24), costs).step_time
    t_zb = simulate(fill_w(zb_h2(8, 24), costs), costs).step_time
    assert t_zb < 0.9 * t_1f1b


@pytest.mark.parametrize("hetero", [False, True], ids=["uniform", "hetero"])
@pytest.mark.parametrize("pp,vpp,placement,m", [(4, 1, "loop", 12), (4, 2, "loop", 8), (4, 2, "v", 10),
                                                 (6, 1, "loop", 7)])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_list_schedule_respects_memory_budget(pp, vpp, placement, m, k, hetero):
    costs = make_costs(pp, vpp, hetero=hetero, placement=placement, seed=k)
    budget = [k * a for a in rank_activation(costs)]
    for fuse in (False, True):
        res = list_schedule(costs, m, activation_limit=budget, fuse=fuse)
        assert res.schedule is not None, res.reason
        assert validate(res.schedule, costs, num_microbatches=m) == []
        sim = simulate(res.schedule, costs)
        assert all(p <= b for p, b in zip(sim.peak_act_bytes, budget))
        assert sim.step_time == pytest.approx(res.makespan)
        assert sim.step_time >= step_lower_bound(costs, m, activation_limit=budget) * (1 - 1e-9)


def test_fill_w_keeps_memory_and_deadlines():
    costs = make_costs(4, hetero=True)
    budget = [4 * a for a in rank_activation(costs)]
    deadlines = {(3, "W", 0): 0.2}
    out = fill_w(generate("1f1b", pp=4, vpp=1, microbatches=8), costs, activation_limit=budget, deadlines=deadlines)
    assert validate(out, costs, num_microbatches=8, deadlines=deadlines) == []
    assert all(p <= b for p, b in zip(simulate(out, costs).peak_act_bytes, budget))


def test_fill_w_reports_an_order_that_cannot_fit():
    costs = make_costs(4)
    budget = [2 * a for a in rank_activation(costs)]  # 1F1B needs 4 in flight on rank 0
    assert fill_w(generate("1f1b", pp=4, vpp=1, microbatches=8), costs, activation_limit=budget) is None


def test_registry_lists_every_family():
    assert {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zbv", "dualpipev", "dualpipev-list"} <= set(SCHEDULES)
