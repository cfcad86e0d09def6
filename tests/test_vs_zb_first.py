"""``benchmarks/vs_zb.py --first-plan``: the cost file it plans is the table the peer gets, and
its first plan is the one ``planner.api.plan`` reports."""

from __future__ import annotations

import json

from planner.core.costs_io import load_costs
from planner.core.stage_costs import stage_costs
from tests.benchmark_modules import load_benchmark

first = load_benchmark("vs_zb_first")  # registered first: vs_zb imports it by name, as its folder's sibling
vs_zb = load_benchmark("vs_zb")


def test_the_cost_file_is_the_peers_table(tmp_path):
    case = vs_zb.CASES[7]  # p 16, +-30% spread
    want = vs_zb.case_costs(case)
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(first.profile_of(want)))
    got = stage_costs(load_costs(path), [(s, s + 1) for s in range(case.p)], list(range(case.p)))
    for field in ("f", "i", "w", "act_bytes", "act_w_bytes", "static_bytes", "out_bytes", "ranks"):
        assert getattr(got, field) == getattr(want, field), field
    assert got.p2p_time(0) == want.p2p_time(0)


def test_a_row_without_the_peer_has_ppplans_side_only():
    row = vs_zb.first_row(vs_zb.CASES[0], None, None)  # p 4, M 8, 2 microbatches of memory
    assert row["first_plan_schedule"] == "1f1b-cap2" and row["first_plan_s"] > 0
    assert 0 < row["first_plan_cpu_s"] and "first_cpu_over_peer_cpu" not in row


def test_the_summary_counts_cases_within_twice_the_peer():
    rows = [{"p": p, "first_cpu_over_peer_cpu": c, "first_wall_over_peer_wall": w}
            for p, c, w in ((4, 1.5, 2.5), (16, 0.5, 0.4), (32, 3.0, 0.1))]
    got = first.first_plan_summary(rows)
    assert got["p_le_16"] == {"cases": 2, "within_2x_cpu": 2, "within_2x_wall": 1, "max_cpu_ratio": 1.5,
                              "max_wall_ratio": 2.5}
    assert got["all"]["cases"] == 3 and got["all"]["within_2x_cpu"] == 2
