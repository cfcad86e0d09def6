"""The launcher API: ``from planner import plan, load_plan, replan`` and ``LaunchPlan``."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys

import pytest

import planner
from planner.core.errors import InputError
from planner.core.plan import Plan, without_wall_s
from planner.export import LaunchPlan, as_launch_plan
from test_export_plans import case_plan


def test_import_planner_is_light():
    code = ("import sys, planner; "
            "print(sorted(m for m in ('torch', 'ortools', 'planner.api', 'matplotlib') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_plan_mirrors_the_cli_and_returns_a_launch_plan(tmp_path):
    from planner import load_plan, plan
    from planner.api import plan as api_plan

    assert plan is api_plan  # one function, one return type
    p = plan("llama3-8b", pp=2, microbatches=4, schedule="1f1b", work=2)
    assert type(p) is LaunchPlan and isinstance(p, Plan)
    assert p.stage_layers(0) == [p.bounds()[0]]
    assert [str(a) for a in p.actions(1)] == p.schedule["1"]
    assert p.megatron_args()[:2] == ["--pipeline-model-parallel-size", "2"]
    assert p.torchtitan_options()["parallelism"]["pipeline_parallel_schedule"] == "1F1B"
    assert json.loads(p.to_json()) == p.to_dict()
    path = tmp_path / "plan.json"
    p.save(path)
    again = load_plan(path)
    assert type(again) is LaunchPlan and again.to_dict() == p.to_dict()


def test_plan_bad_input_raises_input_error():
    from planner import plan

    with pytest.raises(InputError, match="--microbatches: must be >= 1"):
        plan("llama3-8b", microbatches=0)
    with pytest.raises(InputError, match="--schedule: unknown schedule 'zigzag'"):
        plan("llama3-8b", schedule="zigzag")  # the CLI's click.Choice catches it earlier


def test_launch_plan_export_writes_files(tmp_path):
    p = case_plan("uniform")
    result = p.export("deepspeed", tmp_path / "ds.py")
    assert (tmp_path / "ds.py").read_text() == result.files[str(tmp_path / "ds.py")]
    assert p.deepspeed_parts()[-1] == p.model["num_layers"]
    assert p.chrome_trace()["otherData"]["step_time_s"] == pytest.approx(p.predicted.step_time_s)


def test_replan_is_the_function_even_after_its_module_is_imported():
    import planner.replanning  # noqa: F401  (the submodule import must not shadow the API name)
    from planner import replan
    from planner.replanning import replan as module_replan

    assert callable(replan) and not inspect.ismodule(replan)
    assert replan is module_replan and planner.replan is module_replan


def test_a_delivered_plan_is_a_launch_plan():
    from planner.planning.delivery import deliver

    plain = Plan(**{f.name: getattr(case_plan("uniform"), f.name) for f in dataclasses.fields(Plan)})
    out = deliver(plain)
    assert type(out) is LaunchPlan and out.to_json() == plain.to_json()


def test_as_launch_plan_upgrades_plans_inside_results():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Result:
        plan: Plan
        note: str

    plain = Plan(**{f.name: getattr(case_plan("uniform"), f.name) for f in dataclasses.fields(Plan)})
    out = as_launch_plan(Result(plan=plain, note="x"))
    assert isinstance(out.plan, LaunchPlan) and out.note == "x"
    assert isinstance(as_launch_plan((plain, 3))[0], LaunchPlan)
    assert as_launch_plan(3) == 3


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="has no attribute 'plna'"):
        planner.plna  # noqa: B018


def test_plan_options_are_the_cli_flags():
    from planner.cli.plan_cmd import plan_command
    from planner.options import OPTION_NAMES, PlanOptions

    outputs = {"model", "cluster", "out", "as_json", "png", "quiet"}
    flags = {p.name for p in plan_command.params} - outputs
    assert flags == set(OPTION_NAMES)
    defaults = {p.name: p.default for p in plan_command.params if p.name in OPTION_NAMES}
    assert {k: v for k, v in defaults.items() if isinstance(v, (int, float, str))} == {
        f.name: f.default for f in dataclasses.fields(PlanOptions)
        if f.default is not None and f.default != ()}


def test_plan_takes_options_and_checks_override_names():
    from planner.api import plan
    from planner.options import PlanOptions, plan_options

    assert planner.PlanOptions is PlanOptions
    with pytest.raises(InputError, match=r"^shedule: is not a plan option \(use one of pp, vpp"):
        plan("llama3-8b", shedule="1f1b")
    opts = PlanOptions(pp=2, microbatches=4, schedule="1f1b", work=2)
    assert plan_options(opts, {"seed": 3}) == PlanOptions(pp=2, microbatches=4, schedule="1f1b", work=2, seed=3)
    assert plan_options(None, {"deadline": ["W=1"]}).deadline == ("W=1",)
    a = plan("llama3-8b", options=opts)
    b = plan("llama3-8b", pp=2, microbatches=4, schedule="1f1b", work=2)
    assert without_wall_s(a.to_dict()) == without_wall_s(b.to_dict())
