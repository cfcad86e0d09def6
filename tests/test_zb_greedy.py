"""Zero Bubble's automatic heuristic (``solvers.schedule.engines.zb_greedy``): every variant is a
valid schedule within the memory budget and never below the lower bound; on the W-heavy
case where W-filled ZB-H2 stays 0.9% above the bound it reaches the bound."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.core.costs import P2PCost
from planner.core.simulate import simulate
from planner.core.validate import validate
from schedule_fixtures import make_costs as bench_costs
from solvers.schedule.search.lower_bound import step_lower_bound
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.schedule.engines.zb_greedy import ZbKnobs, zb_greedy, zb_greedy_orders

P2P = P2PCost(latency_s=1e-4)


def _w_heavy(make_costs, p: int):
    """F/I/W 1/1/2 ms, half the activations held until W, P2P 0.1 ms."""
    return make_costs(p, f=1e-3, i=1e-3, w=2e-3, act=1000, act_w=500, p2p=P2P)


@pytest.mark.parametrize("p,m,mem", [(2, 3, 1), (4, 8, 2), (4, 16, 8), (6, 13, 3), (8, 32, 4.5), (8, 9, 24)])
@pytest.mark.parametrize("hetero", [False, True], ids=["uniform", "hetero"])
def test_every_variant_is_valid_within_memory_and_above_the_bound(p, m, mem, hetero):
    costs = bench_costs(p, hetero=hetero, seed=p * m)
    budget = MemoryLimit(microbatches=mem).activation_limit(costs)
    lb = step_lower_bound(costs, m, activation_limit=budget)
    got = list(zb_greedy_orders(costs, m, budget))
    assert len(got) == 8 and len({name for name, _ in got}) == 8
    for name, sched in got:
        assert isinstance(sched, dict), f"{name}: {sched}"
        assert validate(sched, costs, num_microbatches=m) == [], name
        sim = simulate(sched, costs)
        assert all(peak <= b for peak, b in zip(sim.peak_act_bytes, budget)), name
        assert sim.step_time >= lb * (1 - 1e-9)


def test_reaches_the_lower_bound_where_w_filled_zb_h2_does_not(make_costs):
    costs = _w_heavy(make_costs, 4)
    budget = MemoryLimit(microbatches=8).activation_limit(costs)
    lb = step_lower_bound(costs, 16, activation_limit=budget)
    assert lb == pytest.approx(67.3e-3)  # rank 3 starts after three forwards and hops, then never idles
    times = {name: simulate(s, costs).step_time for name, s in zb_greedy_orders(costs, 16, budget)}
    assert min(times.values()) == pytest.approx(lb, rel=1e-9)
    knobs = ZbKnobs(fill_warmup=True, hold_forward=True, fill_every_gap=True)
    assert times[knobs.label] == pytest.approx(lb, rel=1e-9)


def test_tight_memory_drains_ws_before_forwards(make_costs):
    costs = _w_heavy(make_costs, 4)
    budget = MemoryLimit(microbatches=1).activation_limit(costs)  # one microbatch of each rank in flight
    for name, sched in zb_greedy_orders(costs, 8, budget):
        assert validate(sched, costs, num_microbatches=8) == [], name
        assert max(simulate(sched, costs).peak_act_bytes) <= 1000


def test_only_stage_r_alone_on_rank_r(make_costs):
    v = make_costs(4, 2, placement="v", act=1)
    assert list(zb_greedy_orders(v, 8, None)) == []
    assert list(zb_greedy_orders(replace(make_costs(4, act=1), ranks=(3, 2, 1, 0)), 8, None)) == []
    knobs = ZbKnobs(fill_warmup=False, hold_forward=False, fill_every_gap=False)
    assert zb_greedy(v, 8, activation_limit=None, knobs=knobs) is None


def test_a_budget_below_one_microbatch_names_the_reason(make_costs):
    costs = _w_heavy(make_costs, 4)
    reasons = {r for _, r in zb_greedy_orders(costs, 8, [999] * 4)}
    assert reasons == {"a forward does not fit the memory budget"}
