"""CP-SAT schedule: whole model and window LNS: validity, warm start, determinism, time limit."""

from __future__ import annotations

import pytest

from planner.core.schedule import OVERLAP
from planner.core.simulate import simulate
from planner.core.validate import validate
from schedule_fixtures import make_costs
from solvers.schedule.cpsat.lns import lns_improve
from solvers.schedule.cpsat.model import ScheduleData, build_model, extract_schedule, solve_model
from solvers.schedule.cpsat.solve import cpsat_improve
from solvers.schedule.engines.list_scheduler import list_schedule
from solvers.schedule.search.lower_bound import step_lower_bound
from solvers.schedule.engines.memory_limit import rank_activation
from solvers.schedule.search.search import generate


def _solve(costs, m, hint, budget=None, fuse=False, seed=0, limit=2.0):
    sm = build_model(ScheduleData(costs=costs, microbatches=m, hint=hint, activation_limit=budget, fuse=fuse))
    res = solve_model(sm, time_limit=limit, seed=seed, workers=2)
    return sm, res, extract_schedule(sm, res)


@pytest.mark.parametrize("hetero", [False, True], ids=["uniform", "hetero"])
def test_whole_model_improves_on_warm_start_within_memory(hetero):
    costs = make_costs(3, hetero=hetero, seed=1)
    budget = [2 * a for a in rank_activation(costs)]
    hint = list_schedule(costs, 5, activation_limit=budget).schedule
    _, res, sched = _solve(costs, 5, hint, budget)
    assert res.status in ("OPTIMAL", "FEASIBLE")
    assert validate(sched, costs, num_microbatches=5) == []
    sim = simulate(sched, costs)
    assert all(p <= b for p, b in zip(sim.peak_act_bytes, budget))
    assert step_lower_bound(costs, 5, activation_limit=budget) <= sim.step_time * (1 + 1e-9)
    assert sim.step_time <= simulate(hint, costs).step_time * (1 + 1e-4)  # ticks round by 1e-5 each


def test_whole_model_chooses_fused_pairs_when_cheaper():
    costs = make_costs(2, fused_share=0.6)
    hint = generate("1f1b", pp=2, vpp=1, microbatches=4)
    _, res, sched = _solve(costs, 4, hint, fuse=True, limit=1.0)
    assert res.status in ("OPTIMAL", "FEASIBLE")
    assert validate(sched, costs, num_microbatches=4) == []
    assert any(a.kind == OVERLAP for acts in sched.values() for a in acts)
    assert simulate(sched, costs).step_time < simulate(hint, costs).step_time


def test_same_seed_same_schedule():
    costs = make_costs(3, hetero=True, seed=4)
    hint = generate("1f1b", pp=3, vpp=1, microbatches=6)
    runs = [_solve(costs, 6, hint, seed=7, limit=0.5)[2] for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("time_limit", [1e-3, 0.05])
def test_tiny_time_limit_never_worse_than_warm_start(time_limit):
    """Stopped almost at once, CP-SAT returns nothing or a valid schedule whose simulated
    step is no longer than the warm start's (up to tick rounding)."""
    costs = make_costs(4, hetero=True)
    hint = generate("1f1b", pp=4, vpp=1, microbatches=8)
    out = cpsat_improve(costs, 8, hint, activation_limit=None, deadlines={}, time_limit=time_limit, seed=0,
                        workers=1)
    assert out.method == "cpsat" and out.status in ("OPTIMAL", "FEASIBLE", "UNKNOWN")
    assert out.wall_s < 5.0
    if out.schedule is not None:
        assert validate(out.schedule, costs, num_microbatches=8) == []
        step, warm = simulate(out.schedule, costs).step_time, simulate(hint, costs).step_time
        assert step <= warm * (1 + 1e-4)  # ticks round by 1e-5 each


@pytest.mark.parametrize("hetero", [False, True], ids=["uniform", "hetero"])
def test_lns_is_valid_deterministic_and_not_worse(hetero):
    costs = make_costs(6, hetero=hetero, seed=2)
    budget = [6 * a for a in rank_activation(costs)]
    hint = generate("1f1b", pp=6, vpp=1, microbatches=24)
    a = lns_improve(costs, hint, activation_limit=budget, time_limit=0.6, seed=3)
    b = lns_improve(costs, hint, activation_limit=budget, time_limit=0.6, seed=3)
    assert a.schedule == b.schedule
    assert validate(a.schedule, costs, num_microbatches=24) == []
    sim = simulate(a.schedule, costs)
    assert all(p <= x for p, x in zip(sim.peak_act_bytes, budget))
    assert a.step_time <= simulate(hint, costs).step_time
    assert a.step_time == pytest.approx(sim.step_time)


def test_lns_keeps_deadlines():
    costs = make_costs(4, hetero=True)
    hint = generate("1f1b", pp=4, vpp=1, microbatches=16)
    sim = simulate(hint, costs)
    deadlines = {(1, "W", 2): sim.step_time * 0.5}
    ends = {str(a): e for a, e in zip(sim.actions, sim.end)}
    assert ends["1B2"] <= deadlines[(1, "W", 2)]
    out = lns_improve(costs, hint, deadlines=deadlines, time_limit=0.5)
    assert validate(out.schedule, costs, num_microbatches=16, deadlines=deadlines) == []


def test_lns_budget_is_counted_in_work_seconds():
    from solvers.schedule.cpsat.lns import WORK_S_PER_VAR

    costs = make_costs(6, hetero=True, seed=2)
    hint = generate("1f1b", pp=6, vpp=1, microbatches=24)
    one = lns_improve(costs, hint, time_limit=1e-9)
    assert one.windows == 1 and one.work_s > 0  # the budget is checked before each window
    limit = 0.3
    out = lns_improve(costs, hint, time_limit=limit)
    assert out.windows > 1
    # each window charges at least WORK_S_PER_VAR per variable; the search stops once the limit is spent
    assert out.work_s >= out.windows * WORK_S_PER_VAR
    assert out.work_s < 2 * limit  # at most one window past the limit
    # the last windows get only what is left of the budget (MIN_WINDOW_S at least)
    from solvers.schedule.cpsat.lns import DET_TO_WORK, MIN_WINDOW_S
    for limit in (0.3, 1.0):
        out = lns_improve(costs, hint, time_limit=limit)
        assert out.work_s <= limit + DET_TO_WORK * MIN_WINDOW_S + 0.05
