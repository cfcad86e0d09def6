"""Every plan ``ppplan plan`` writes reads back and validates: failed candidates carry no
infinite time."""

from __future__ import annotations

from planner.core.plan import load_plan_file
from planner.simulation import validate_plan


def test_a_candidate_no_partition_fits_is_recorded_without_a_time(ppplan, tmp_path):
    # the interleaved order with no recomputation fits no partition the screening drew
    result = ppplan("plan", "llama3-8b", "--pp", "4", "--vpp", "2", "--target", "torchtitan",
                    "--microbatches", "16", "--work", "0.5", "--quiet")
    assert result.code == 0, result.err
    plan = load_plan_file(tmp_path / "plan.json")  # the loader refused "step_time_s: inf" here
    assert validate_plan(plan) == []
    failed = [c for c in plan.solver["candidates"] if c.get("status") == "infeasible"]
    assert failed, "the case no longer has a candidate over memory"
    for entry in failed:
        assert entry.get("step_time_s") is None and entry["reason"]
