"""``--objective steady`` through the user's path (a cost table and ``ppplan plan``) finds what
the schedule search finds on the same costs: on the Zero Bubble paper's setting (Qi et al.,
ICLR 2024, sec. 5: p 8, M 24, F/I/W 18.52/18.09/9.34 ms, P2P 0.6 ms) the period at the
steady-state lower bound, bubble at or below the paper's 0.0433 for ZB-2p."""

from __future__ import annotations

from cost_tables import write_stage_table
from planner.core.plan import load_plan_file
from planner.simulation import validate_plan
from solvers.schedule.search.steady_order import steady_lower_bound


def test_the_zero_bubble_setting_plans_at_the_steady_bound(ppplan, tmp_path):
    table = write_stage_table(tmp_path / "zb.json", f=18.52e-3, i=18.09e-3, w=9.34e-3, factors=[1.0] * 8,
                              latency_s=0.6e-3, bandwidth=float("inf"))
    result = ppplan("plan", "--profile", str(table), "--pp", "8", "--microbatches", "24",
                    "--memory-limit", "16microbatches", "--objective", "steady", "--seed", "1",
                    "--work", "1", "--quiet")
    assert result.code == 0, result.err
    plan = load_plan_file(tmp_path / "plan.json")
    assert validate_plan(plan) == []
    bound = steady_lower_bound(plan.parsed_stage_costs(), 24)
    assert plan.predicted.steady_step_time_s <= bound * (1 + 1e-9)  # 1.15265 s; was 1.2087 s
    assert plan.predicted.steady_bubble_fraction <= 0.0433
