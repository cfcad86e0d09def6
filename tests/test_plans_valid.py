"""Every plan ``ppplan plan`` writes reads back and validates: failed candidates carry no
infinite time, JSON writing refuses NaN and infinities, and a plan that its own loader or
validator refuses is an internal error, never a written file."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from planner.core.plan import load_plan_file
from planner.simulation import validate_plan


def test_a_candidate_no_partition_fits_is_recorded_without_a_time(ppplan, tmp_path):
    # the interleaved order with no recomputation fits no partition the screening drew
    result = ppplan("plan", "llama3-8b", "--pp", "4", "--vpp", "2", "--target", "torchtitan",
                    "--microbatches", "16", "--work", "0.5", "--quiet")
    assert result.code == 0, result.err
    plan = load_plan_file(tmp_path / "plan.json")  # the loader refused "step_time_s: inf" here
    assert validate_plan(plan) == []
    failed = [c for c in plan.solver.candidates if c.get("status") == "infeasible"]
    assert failed, "the case no longer has a candidate over memory"
    for entry in failed:
        assert entry.get("step_time_s") is None and entry["reason"]


def test_json_writing_refuses_nan_and_infinities():
    from planner.core.jsonio import UnreadableOutput, json_text

    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(UnreadableOutput, match=r"out\.solver\.candidates\[1\]\.step_time_s"):
            json_text({"solver": {"candidates": [{}, {"step_time_s": bad}]}}, what="out")
    # a free link (infinite bandwidth) is the one infinity the formats read back
    assert json.loads(json_text({"p2p": {"bandwidth": math.inf}}, what="out"))["p2p"]["bandwidth"] == math.inf


def test_plan_to_json_refuses_what_the_loader_refuses(ppplan, tmp_path):
    from planner.core.jsonio import UnreadableOutput

    assert ppplan("plan", "llama3-8b", "--work", "0.2", "--quiet").code == 0
    plan = load_plan_file(tmp_path / "plan.json")
    plan.predicted = replace(plan.predicted, bubble_fraction=math.nan)
    with pytest.raises(UnreadableOutput, match="predicted.bubble_fraction"):
        plan.to_json()


def _corrupt(monkeypatch, how):
    """Make the planner's last pass break the plan it hands on (``how(plan)``)."""
    import planner.planning as planning

    record = planning.record_schedule

    def broken(plan, *args, **kwargs):
        record(plan, *args, **kwargs)
        how(plan)

    monkeypatch.setattr(planning, "record_schedule", broken)


@pytest.mark.parametrize("how,names", [
    (lambda plan: setattr(plan, "solver", replace(plan.solver, estimate_s=math.inf)), "solver.estimate_s"),
    (lambda plan: plan.schedule["0"].pop(), "validator"),
], ids=["loader", "validator"])
def test_a_plan_its_loader_or_validator_refuses_is_an_internal_error(ppplan, tmp_path, monkeypatch, how, names):
    _corrupt(monkeypatch, how)
    result = ppplan("plan", "llama3-8b", "--work", "0.2", "--quiet")
    assert result.code == 70, result.err  # a bug, said as such: not bad input, not a written file
    assert result.err.startswith("internal error: PlanDefect") and names in result.err
    assert not (tmp_path / "plan.json").exists()


def test_the_api_checks_the_plan_it_returns(monkeypatch):
    from planner import plan
    from planner.planning.delivery import PlanDefect

    _corrupt(monkeypatch, lambda p: setattr(p, "predicted", replace(p.predicted, step_time_s=math.nan)))
    with pytest.raises(PlanDefect, match="predicted.step_time_s"):
        plan("llama3-8b", work=0.2)
