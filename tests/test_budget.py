"""Search budgets: --work (deterministic) and the --time-limit wall cap: refused values, phase
deadlines, the budget record, the summary's warning, the bar."""

from __future__ import annotations

import math
import time

import pytest

from plan_helpers import without_wall_s
from conftest import TtyStream
from planner import progress as prog
from planner.api import plan
from planner.core.errors import InputError
from planner.simulation import validate_plan
from planner.planning import PlanRequest, make_plan
from planner.cli.summary import plan_summary
from planner.core.simulate import simulate
from solvers.schedule.families.generators import one_f_one_b
from solvers.schedule.search.candidates import clear_memo, simulated
from solvers.schedule.search.budget import ACTIONS_PER_WORK_S, PHASE_SHARES, WallBudget, check_time_limit
from test_joint import _moe_table


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan, 0.0, -1.0, 1e9])
def test_unusable_time_limits_are_refused_naming_the_option(bad):
    with pytest.raises(InputError, match="--time-limit"):
        check_time_limit(bad)
    with pytest.raises(InputError, match="--time-limit"):
        plan("llama3-8b", time_limit=bad)
    with pytest.raises(InputError, match="--work"):
        plan("llama3-8b", work=bad)


def test_phase_deadlines_are_shares_of_the_limit_and_cuts_are_recorded():
    b = WallBudget(10.0, start=100.0)
    assert b.deadline("screen") == pytest.approx(100.0 + 10.0 * PHASE_SHARES["screen"])
    assert sorted(PHASE_SHARES.values()) == list(PHASE_SHARES.values())  # phases end in order
    assert max(PHASE_SHARES.values()) < 1.0  # what is left pays for validating and writing
    late = WallBudget(1.0, start=time.perf_counter() - 5.0)
    assert late.phase("joint").expired() and late.bound and late.cuts == ["joint"]
    assert late.cap(3.0, "polish", floor=0.1) == 0.1 and late.cuts == ["joint", "polish"]
    free = WallBudget(None)
    assert not free.phase("polish").expired() and free.cap(3.0, "polish") == 3.0 and not free.bound


def test_two_interleaved_budgets_count_independently(make_costs):
    """Each plan's budget owns its work meter: timings charged to one plan's budget never
    show in another's count or move its work cuts, however the two interleave."""
    sched, costs = one_f_one_b(2, 4), make_costs(2)
    n = sum(len(v) for v in sched.values())
    a = WallBudget(None, work_actions=2 * n / PHASE_SHARES["screen"])
    b = WallBudget(None, work_actions=2 * n / PHASE_SHARES["screen"])
    simulate(sched, costs, meter=a.meter)
    simulate(sched, costs, meter=b.meter)
    simulate(sched, costs, meter=a.meter)
    simulate(sched, costs)  # a library call outside any plan
    assert (a.spent(), b.spent()) == (2 * n, n)
    assert a.phase("screen").expired() and not b.phase("screen").expired()
    assert (a.work_cuts, b.work_cuts) == (["screen"], [])
    assert (a.record()["timed_actions"], b.record()["timed_actions"]) == (2 * n, n)
    assert WallBudget(None).spent() == 0  # a new plan starts from nothing


def test_two_plans_draw_their_own_candidates_and_clear_only_theirs(make_costs):
    """A memo hit times nothing, so one plan served or cleared by another's memo would
    count other actions: each budget's meter has its own memo."""
    costs, args = make_costs(4, f=1.0, i=2.0), (8, None, {}, ["1f1b", "gpipe"], False)
    a, b = WallBudget(None), WallBudget(None)
    first = simulated(costs, *args, meter=a.meter)
    spent = a.spent()
    assert spent > 0
    assert simulated(costs, *args, meter=a.meter) is first and a.spent() == spent  # a memo hit
    assert simulated(costs, *args, meter=b.meter) == first and b.spent() == spent  # drawn afresh
    clear_memo(a.meter)
    assert simulated(costs, *args, meter=b.meter) == first and b.spent() == spent  # b's memo is kept
    assert simulated(costs, *args, meter=a.meter) == first and a.spent() == 2 * spent
    clear_memo()


def test_an_exhausted_budget_still_gives_a_valid_plan_and_says_so():
    req = PlanRequest(pp=4, microbatches=8, memory_limit_bytes=None, work_s=0.2)
    p = make_plan(_moe_table(), req, budget=WallBudget(1e-6))
    assert p.solver.budget["bound"] is True
    assert p.solver.budget["cut_phases"][0] == "screen"
    assert p.predicted.step_time_s > 0 and validate_plan(p) == []
    assert any(c.get("status") == "skipped" for c in p.solver.candidates)
    assert all(v.status == "skipped (time limit)" or v.step_time_s is not None
               for k, v in p.baselines.items() if k != "plan" and v.status != "infeasible")


def test_unbound_budget_keeps_the_plan_reproducible():
    req = PlanRequest(pp=4, microbatches=8, memory_limit_bytes=None, work_s=0.2)
    a = make_plan(_moe_table(), req, budget=WallBudget(3600.0, work_actions=req.work_s * ACTIONS_PER_WORK_S)).to_dict()
    b = make_plan(_moe_table(), req).to_dict()  # library call: no wall budget at all
    assert a["solver"]["budget"]["bound"] is False and b["solver"]["budget"]["time_limit_s"] is None
    for d in (a, b):
        d["solver"].pop("budget")
    assert without_wall_s(a) == without_wall_s(b)


def test_a_cap_that_fires_opens_the_summary_and_no_cap_is_the_library_search():
    capped = plan("llama3-8b", pp=2, schedule="1f1b", work=0.5, time_limit=1e-3)  # fires in every phase
    budget = capped.solver.budget
    assert budget["time_limit_s"] == 1e-3 and budget["work"] == 0.5 and budget["bound"] and budget["cut_phases"]
    assert validate_plan(capped) == []
    first = plan_summary(capped).splitlines()[0]
    assert first.startswith("warning: the --time-limit 0.001 s wall-clock cap cut the search in ")
    assert all(phase in first for phase in budget["cut_phases"])
    free = plan("llama3-8b", pp=2, schedule="1f1b", work=0.5)  # no cap: nothing read off a clock
    assert free.solver.budget["time_limit_s"] is None and not free.solver.budget["bound"]
    assert not plan_summary(free).startswith("warning")




def test_clock_bar_past_its_total_shows_the_phase_not_a_stuck_100(monkeypatch):
    monkeypatch.delenv("PPPLAN_QUIET", raising=False)
    prog.set_quiet(False)
    bar = prog.Progress("planning", 1.0, unit="s", stream=TtyStream(), clock=True)
    bar.phase, bar.note = "polish", "best 1.23 s"
    bar.set(0.5)
    assert "50%" in bar.render() and "polish" in bar.render() and "best 1.23 s" in bar.render()
    bar.set(1.7)
    text = bar.render()
    assert "100%" not in text and "finishing" in text and "+0.7s" in text


def test_baselines_run_even_when_the_work_budget_is_spent():
    """With no --time-limit, the baselines (one evaluation each, reporting only) are simulated
    even once the search's work is spent: the plan's "vs plan" table is never empty for want of
    work, and a wall cap is the only thing that skips them."""
    req = PlanRequest(pp=4, microbatches=8, memory_limit_bytes=None, work_s=0.001)
    p = make_plan(_moe_table(), req)
    assert p.solver.budget["time_limit_s"] is None and "polish" in p.solver.budget["work_cut_phases"]
    assert all(v.step_time_s is not None and v.status is None for k, v in p.baselines.items() if k != "plan")
