"""A search cut short never reads as infeasibility ([Note: first valid] in
solvers.schedule.search.candidates, [Note: unproven] in solvers.partition.search).

The two p 32 cases: ZB-H2 is drawn among the first and needs up to 2p microbatches in
flight, over a memory limit of p (or 1.5p) microbatches; a wall deadline that passed
before the draw began must still let the draw reach an order that fits.
"""

from __future__ import annotations

import time

import pytest

from planner.cli import cli
from planner.cli.common import run_guarded
from planner.core.costs import P2PCost
from planner.core.errors import NOT_PROVEN, BudgetExhausted, InfeasibleError
from solvers.schedule.search.budget import WallBudget
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.schedule.search.search import best_schedule
from solvers.schedule.search.candidates import clear_memo


def _expired(phase: str = "polish"):
    """A phase deadline that passed long ago (the tiniest wall budget there is)."""
    return WallBudget(1e-6, start=time.perf_counter() - 10.0).phase(phase)


@pytest.mark.parametrize("m,mb", [(64, 1.0), (256, 1.5)])
def test_a_passed_deadline_still_finds_the_schedule_that_fits(make_costs, m, mb):
    p = 32
    costs = make_costs(p, f=1e-3, i=1e-3, w=1e-3, act=1 << 20, act_w=1 << 18,
                       p2p=P2PCost(latency_s=1e-4, bandwidth=float("inf")))
    limit = MemoryLimit(microbatches=mb * p)
    clear_memo()
    cut = best_schedule(costs, microbatches=m, memory_limit=limit, deadline=_expired(), polish=False)
    clear_memo()
    free = best_schedule(costs, microbatches=m, memory_limit=limit, polish=False)
    assert cut.step_time >= free.step_time > 0
    assert cut.step_time < float("inf")


def test_proven_infeasibility_is_still_infeasible(make_costs):
    costs = make_costs(4, f=1e-3, i=1e-3, w=1e-3, act=1 << 20, static=1 << 30)
    with pytest.raises(InfeasibleError) as err:  # not one microbatch per stage fits: proven by a bound
        best_schedule(costs, microbatches=8, memory_limit=MemoryLimit(bytes=1 << 29), deadline=_expired())
    assert not isinstance(err.value, BudgetExhausted)


def test_budget_exhausted_has_its_own_exit_code_and_words(monkeypatch, capsys, tmp_path):
    def out_of_budget(*args, **kwargs):
        raise BudgetExhausted("CP-SAT found no chunk partition within its budget")

    monkeypatch.setattr("planner.api.plan", out_of_budget)
    out = tmp_path / "plan.json"
    code = run_guarded(cli, ["plan", "llama3-8b", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 3 and not out.exists()
    assert err.startswith(f"error: {NOT_PROVEN}: CP-SAT found no chunk partition") and "raise --work" in err
    assert len(err.strip().splitlines()) == 1
