"""``--target``: the capability table, what the search enumerates for each target, the plan's
record of it, the summary's "runs on" line, and refusals that name the --target to re-plan with."""

from __future__ import annotations

import json

import pytest

from planner.api import plan as api_plan
from planner.core.errors import InputError
from planner.core.plan import Plan
from planner.core.targets import TARGETS, get_target, target_for_format
from planner.export import ExportError, export_plan
from planner.export.targets import runnable_targets
from planner.planning.targets import target_runs
from profiler.analytical import analytical_costs
from solvers.schedule.families.registry import SCHEDULES
from test_export_plans import _table, case_plan


def test_every_target_exports_to_its_own_format_and_names_real_families():
    for name, target in TARGETS.items():
        assert target_for_format(target.export_format) == name
        assert all(target_for_format(fmt) == name for fmt in target.other_formats)
        assert target.families is None or set(target.families) <= set(SCHEDULES)
    assert target_for_format("megatron-bridge") == "megatron"  # Bridge's overrides run Megatron-Core
    with pytest.raises(InputError, match=r"--target: unknown target 'jax'"):
        get_target("jax")


def test_megatron_runs_fused_pairs_only_with_virtual_stages_and_ep():
    _, _, table = _table("qwen3-30b-a3b")
    meg = TARGETS["megatron"]
    one = target_runs(meg, table, schedule="auto", pp=4, vpp=1, ep=8, placement="loop", modes=["none", "full"])
    assert [r.schedule for r in one] == ["1f1b"]
    two = target_runs(meg, table, schedule="auto", pp=4, vpp=2, ep=8, placement="loop",
                      modes=["none", "selective", "full"])
    assert [(r.schedule, r.modes) for r in two] == [("interleaved", ("none", "selective", "full")),
                                                     ("interleaved-overlap", ("none", "selective"))]
    no_ep = target_runs(meg, table, schedule="auto", pp=4, vpp=2, ep=1, placement="loop", modes=["none"])
    assert [r.schedule for r in no_ep] == ["interleaved"]


def test_deepspeed_runs_only_1f1b_without_selective():
    _, _, table = _table("llama3-8b")
    runs = target_runs(TARGETS["deepspeed"], table, schedule="auto", pp=4, vpp=1, ep=1, placement="loop",
                       modes=["none", "selective", "full"])
    assert [(r.schedule, r.modes) for r in runs] == [("1f1b", ("none", "full"))]


@pytest.mark.parametrize("kw, match", [
    (dict(target="deepspeed", vpp=2), r"--vpp: deepspeed holds at most 1 stage per rank, got vpp 2 "
                                      r"\(use --vpp 1, or re-plan with --target torch"),
    (dict(target="megatron", vpp=2, placement="v"), r"--placement: megatron builds only loop placement"),
    (dict(target="megatron", schedule="zb-h1"), r"--schedule: megatron does not run zb-h1"),
    (dict(target="megatron", schedule="cpsat"), r"--schedule: megatron takes no explicit order"),
    (dict(target="torchtitan", schedule="1f1b-overlap"), r"1f1b-overlap fuses F&B pairs, which torchtitan"),
    (dict(target="torchtitan", pp=1, dp=16), r"--pp: torchtitan builds no pipeline stages with pp 1"),
])
def test_requests_a_target_cannot_run_are_one_line_input_errors(kw, match):
    with pytest.raises(InputError, match=match):
        api_plan("llama3-8b", work=1.0, **kw)


def test_plan_records_its_target_and_old_plans_load_as_torch():
    plan = api_plan("llama3-8b", target="deepspeed", work=1.0)
    data = json.loads(plan.to_json())
    assert data["target"] == "deepspeed"
    assert Plan.from_dict(data).extra["target"] == "deepspeed"
    data.pop("target")
    assert "target" not in Plan.from_dict(data).extra  # a plan from before --target still loads
    with pytest.raises(InputError, match=r"plan\.target"):
        Plan.from_dict({**data, "target": "jax"})


def test_summary_says_where_the_plan_runs(ppplan, tmp_path):
    made = ppplan("plan", "llama3-8b", "--target", "deepspeed", "--work", "1", "--out", "p.json")
    assert made.code == 0, made.err
    line = next(x for x in made.out.splitlines() if x.startswith("target:"))
    assert line.startswith("target: made for --target deepspeed; runs as planned on: torch, megatron, ")
    assert "deepspeed" in line.split("runs as planned on:")[1].split(";")[0]


def test_refusal_names_the_target_to_replan_with():
    plan = case_plan("w_moved")
    with pytest.raises(ExportError, match=r"\(re-plan with --target megatron; or "):
        export_plan(plan, "megatron")
    found = runnable_targets(plan)
    assert found["torch"] is None and found["megatron"] and found["deepspeed"]


def test_torchtitan_target_plans_on_serial_pair_costs():
    """A framework without F&B overlap sees every pair at its serial cost: no fused candidate."""
    from planner.planning.targets import _without_pairs

    spec, cl, full = _table("qwen3-30b-a3b")
    assert any(full.ov(a, a) < full.serial_pair(a, a) for a in range(full.num_layers))
    table = _without_pairs(analytical_costs(spec, cl))
    assert all(table.ov(a, a) == table.serial_pair(a, a) for a in range(table.num_layers))
