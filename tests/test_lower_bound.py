"""The step lower bound (solvers/schedule/search/lower_bound.py) holds against optimal schedules and
the 'no pairs before the first input-gradient' term tightens it for fused costs."""

from __future__ import annotations

import pytest

from schedule_fixtures import make_costs
from solvers.schedule.cpsat.model import ScheduleData, build_model, extract_schedule, solve_model
from solvers.schedule.search.lower_bound import bound_parts, step_lower_bound
from planner.core.simulate import simulate
from solvers.schedule.search.search import generate


def _old_rank_work(costs, m, head):
    """The bound without the window term: head + work - M x min(F-side, I-side saving)."""
    best = 0.0
    for r in range(costs.num_ranks):
        mine = [s for s in range(costs.num_stages) if costs.ranks[s] == r]
        work = sum(m * (costs.f[s] + costs.i[s] + costs.w[s]) for s in mine)
        sav = {(a, b): max(0.0, costs.f[a] + costs.i[b] - costs.fused_time(a, b)) for a in mine for b in mine}
        by_f = sum(max(sav[(a, b)] for b in mine) for a in mine)
        by_i = sum(max(sav[(a, b)] for a in mine) for b in mine)
        best = max(best, min(head[s] for s in mine) + work - m * min(by_f, by_i))
    return best


def test_window_term_tightens_the_fused_bound():
    costs = make_costs(4, fused_share=0.6)
    head, t = [0.0], 0.0
    for s in range(1, 4):
        t += costs.f[s - 1] + costs.p2p_time(s - 1)
        head.append(t)
    parts = bound_parts(costs, 8)
    assert parts["rank_work"] > _old_rank_work(costs, 8, head) * 1.01


@pytest.mark.parametrize("pp, m, share", [(2, 4, 0.6), (3, 6, 0.7), (2, 6, 0.5), (3, 4, 0.4), (2, 5, 0.9), (4, 8, 0.6)])
def test_optimal_fused_schedules_are_above_the_bound(pp, m, share):
    costs = make_costs(pp, hetero=True, seed=pp + m, fused_share=share)
    hint = generate("1f1b-overlap", pp=pp, vpp=1, microbatches=m)
    sm = build_model(ScheduleData(costs=costs, microbatches=m, hint=hint, activation_limit=None, deadlines={},
                                  fuse=True))
    res = solve_model(sm, time_limit=5.0, seed=0, workers=1)
    sched = extract_schedule(sm, res) or hint
    step = simulate(sched, costs).step_time
    assert step >= step_lower_bound(costs, m) * (1 - 1e-9)
