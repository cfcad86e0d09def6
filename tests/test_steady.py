"""Steady-state objective and the bound record (issue 19)."""

from __future__ import annotations

import pytest

from planner.core.costs import P2PCost
from planner.core.schedule import Action
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from planner.core.steady import repeat_schedule, steady_state
from planner.core.validate import validate
from planner.planning import PlanRequest, make_plan
from solvers.schedule.families.generators import one_f_one_b
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.schedule.search.search import best_schedule
from test_joint import _moe_table


def zb_costs(p: int = 8) -> StageCosts:
    """Zero Bubble's setting (Qi et al., ICLR 2024): F 18.52, I 18.09, W 9.34, P2P 0.60 ms."""
    act = 2**30
    return StageCosts(f=(18.52e-3,) * p, i=(18.09e-3,) * p, w=(9.34e-3,) * p, act_bytes=(act,) * p,
                      act_w_bytes=(act * 2 // 5,) * p, static_bytes=(0,) * p, out_bytes=(0,) * p,
                      ranks=tuple(range(p)), p2p=P2PCost(latency_s=0.6e-3, bandwidth=1e30))


def test_repeated_schedule_is_a_valid_schedule_of_k_times_the_microbatches():
    sched = one_f_one_b(4, 6, split_w=True, fuse=False)
    rep = repeat_schedule(sched, 6, 3)
    assert all(len(rep[r]) == 3 * len(sched[r]) for r in sched)
    assert rep[0][len(sched[0])] == Action(0, "F", 6)
    c = zb_costs(4)
    assert validate(rep, c, num_microbatches=18) == []


def test_steady_timing_equals_simulating_the_repeated_schedule():
    c = zb_costs(8)
    for sched in (one_f_one_b(8, 24, split_w=True), one_f_one_b(8, 24)):
        st = steady_state(sched, c, 24)
        assert st.step_ends_s[-1] == pytest.approx(simulate(repeat_schedule(sched, 24, 3), c).step_time)


def test_steady_period_is_between_rank_work_and_the_makespan():
    c = zb_costs(8)
    for sched in (one_f_one_b(8, 24, split_w=True), one_f_one_b(8, 24)):
        st = steady_state(sched, c, 24)
        work = 24 * (c.f[0] + c.i[0] + c.w[0])
        assert work * (1 - 1e-9) <= st.period_s <= simulate(sched, c).step_time * (1 + 1e-9)
        assert st.first_step_s == pytest.approx(simulate(sched, c).step_time)
        assert 0.0 <= st.bubble_fraction < 1.0


def test_steady_objective_picks_the_shorter_period():
    c, m = zb_costs(8), 24
    limit = MemoryLimit(microbatches=16)  # 2p
    ms = best_schedule(c, microbatches=m, memory_limit=limit, polish=False)
    st = best_schedule(c, microbatches=m, memory_limit=limit, objective="steady")
    p_ms, p_st = steady_state(ms.schedule, c, m).period_s, steady_state(st.schedule, c, m).period_s
    assert p_st <= p_ms * (1 + 1e-12)
    assert p_st < ms.step_time  # overlapping consecutive steps beats the single-step makespan here
    assert all("steady_step_time_s" in d for d in st.tried if d.get("step_time_s") is not None)


def test_every_plan_reports_the_steady_step_and_which_bound_term_binds():
    req = PlanRequest(pp=4, microbatches=8, memory_limit_bytes=2000, work_s=0.2)
    p = make_plan(_moe_table(), req)
    pred = p.predicted
    assert 0 < pred["steady_step_time_s"] <= pred["step_time_s"] * (1 + 1e-9)
    assert pred["lower_bound_memory_limited"] is True
    assert pred["lower_bound_binds"] in pred["lower_bound_terms"]
    assert pred["lower_bound_s"] == max(pred["lower_bound_terms"].values())
    assert pred["lower_bound_s"] == p.solver.schedule_solver["lower_bound_s"]
    assert pred["lower_bound_terms"]["memory"] > pred["lower_bound_terms"]["round_trip"]  # the budget counts


def test_steady_objective_plan_is_not_slower_in_steady_state():
    base = dict(pp=4, microbatches=8, memory_limit_bytes=None, work_s=0.2)
    ms = make_plan(_moe_table(), PlanRequest(**base))
    st = make_plan(_moe_table(), PlanRequest(**base, objective="steady"))
    assert st.solver.objective == "steady"
    assert st.predicted.steady_step_time_s <= ms.predicted.steady_step_time_s * (1 + 1e-9)


def test_unknown_objective_is_refused():
    from planner.api import plan
    from planner.core.errors import InputError

    with pytest.raises(InputError, match="--objective"):
        plan("llama3-8b", objective="throughput")


def test_cli_objective_steady_is_recorded(tmp_path):
    import json

    from click.testing import CliRunner

    from planner.cli import cli

    out = tmp_path / "p.json"
    res = CliRunner().invoke(cli, ["plan", "llama3-8b", "--pp", "4", "--objective", "steady",
                                   "--work", "3", "--quiet", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["solver"]["objective"] == "steady"
    assert 0 < data["predicted"]["steady_step_time_s"] <= data["predicted"]["step_time_s"] * (1 + 1e-9)
    bad = CliRunner().invoke(cli, ["plan", "llama3-8b", "--objective", "fast", "--out", str(tmp_path / "q.json")])
    assert bad.exit_code == 2 and not (tmp_path / "q.json").exists()
