"""Plan JSON: round trip, schema errors and consistency errors, each naming its field."""

from __future__ import annotations

import copy
import json

import pytest

from planner.core.errors import InputError
from planner.core.plan import Plan, load_plan_file, stage_costs_from_dict, stage_costs_to_dict
from planner.core.schedule import format_schedule
from planner.core.simulate import simulate
from solvers.schedule.families.generators import interleaved_1f1b


@pytest.fixture
def plan(make_costs) -> Plan:
    """A 2-rank, vpp 2 plan over 8 layers with an interleaved schedule."""
    costs = make_costs(2, 2, f=[1.0, 2.0, 1.5, 1.0], i=2.0, w=0.5, act=[10, 20, 30, 40],
                       act_w=[1, 2, 3, 4], static=[100, 100, 100, 100], out=[5, 5, 5, 5],
                       fused={(0, 0): 2.5, (0, 2): 2.0, (2, 0): 2.0, (2, 2): 3.0,
                              (1, 1): 3.5, (1, 3): 2.5, (3, 1): 3.0, (3, 3): 2.0})
    sched = interleaved_1f1b(2, 2, 4)
    sim = simulate(sched, costs)
    bounds = [(0, 2), (2, 4), (4, 6), (6, 8)]
    return Plan(
        model={"name": "toy", "num_layers": 8, "layout": "EttttttL"},
        cluster={"gpu": {"name": "h100"}, "num_gpus": 2},
        parallel={"pp": 2, "vpp": 2, "tp": 1, "ep": 1, "dp": 1, "placement": "loop"},
        microbatches={"count": 4, "size": 1},
        stages=[{"stage": s, "rank": r, "layers": list(b)}
                for s, (b, r) in enumerate(zip(bounds, costs.ranks))],
        schedule=format_schedule(sched),
        stage_costs=stage_costs_to_dict(costs),
        predicted={"step_time_s": sim.step_time, "bubble_fraction": sim.bubble_fraction, "mfu": 0.0,
                   "peak_memory_bytes": sim.peak_memory_bytes, "memory_limit_bytes": 10**6},
        baselines={"uniform": {"step_time_s": sim.step_time * 1.1}},
        solver={"name": "test", "status": "FIXED", "wall_s": 0.0, "gap": None},
        extra={"replan": {"note": "kept"}},
    )


def test_round_trip_file(tmp_path, plan):
    path = tmp_path / "plan.json"
    plan.save(path)
    back = load_plan_file(path)
    assert back.to_dict() == plan.to_dict()
    assert back.extra == {"replan": {"note": "kept"}}
    assert list(json.loads(path.read_text()))[:11] == [
        "schema_version", "model", "cluster", "parallel", "microbatches", "stages", "schedule",
        "predicted", "baselines", "solver", "costs"]


def test_round_trip_preserves_stage_costs_and_simulation(plan):
    back = Plan.from_dict(json.loads(plan.to_json()))
    costs = back.parsed_stage_costs()
    assert stage_costs_from_dict(stage_costs_to_dict(costs), back.ranks()) == costs
    assert simulate(back.parsed_schedule(), costs).step_time == plan.predicted.step_time_s
    assert back.stage_layers(1) == [(2, 4), (6, 8)]
    assert [str(a) for a in back.actions(0)[:3]] == ["0F0", "0F1", "2F0"]


def _broken(plan: Plan, edit) -> dict:
    data = copy.deepcopy(plan.to_dict())
    edit(data)
    return data


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("schedule"), r"plan: 'schedule' is a required property"),
    (lambda d: d.update(schema_version=7), r"plan\.schema_version"),
    (lambda d: d["parallel"].pop("dp"), r"plan\.parallel: 'dp' is a required property"),
    (lambda d: d["microbatches"].update(count=0), r"plan\.microbatches\.count"),
    (lambda d: d["stages"][1].update(layers=[2]), r"plan\.stages\[1\]\.layers"),
    (lambda d: d["schedule"].update({"x": []}), r"plan\.schedule"),
    (lambda d: d["predicted"].update(bubble_fraction=1.5), r"plan\.predicted\.bubble_fraction"),
    (lambda d: d["solver"].pop("gap"), r"plan\.solver: 'gap' is a required property"),
    (lambda d: d["model"].update(layout="EtX"), r"plan\.model\.layout"),
    (lambda d: d["baselines"].update(flops={}), r"plan\.baselines\.flops: 'step_time_s' is a required"),
])
def test_schema_errors_name_the_field(plan, edit, field):
    with pytest.raises(InputError, match=field):
        Plan.from_dict(_broken(plan, edit))


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["stages"][2].update(stage=3), r"plan\.stages\[2\]\.stage: is 3, expected 2"),
    (lambda d: d["stages"][0].update(rank=2), r"plan\.stages\[0\]\.rank: 2 is not in 0\.\.1"),
    (lambda d: d["stages"].pop(), r"plan\.stages: 3 stages but pp x vpp = 2 x 2"),
    (lambda d: d["stages"][1].update(layers=[3, 4]), r"plan\.stages: stages\[1\]\.layers = \[3, 4\]"),
    (lambda d: d["model"].update(num_layers=9), r"plan\.stages: stages cover layers \[0, 8\) but the model has 9"),
    (lambda d: d["schedule"]["1"].__setitem__(3, "1X0"), r"plan\.schedule\[1\]\[3\]: bad action '1X0'"),
    (lambda d: d["schedule"].update({"5": ["0F0"]}), r"plan\.schedule\.5: rank 5 is not in 0\.\.1"),
    (lambda d: d["stage_costs"]["w"].pop(), r"plan\.stage_costs\.w: has 3 entries for 4 stages"),
])
def test_consistency_errors_name_the_field(plan, edit, field):
    with pytest.raises(InputError, match=field):
        Plan.from_dict(_broken(plan, edit))


def test_bad_plan_files(tmp_path):
    with pytest.raises(InputError, match="plan: cannot read"):
        load_plan_file(tmp_path / "none.json")
    bad = tmp_path / "plan.json"
    bad.write_text("{")
    with pytest.raises(InputError, match=r"plan: .* is not valid JSON"):
        load_plan_file(bad)


def test_plan_parts_are_typed_and_read_by_attribute(plan):
    from dataclasses import FrozenInstanceError

    from planner.core.plan import Microbatches, ModelInfo, Parallel, Stage

    back = Plan.from_dict(json.loads(plan.to_json()))
    assert isinstance(back.model, ModelInfo) and back.model.num_layers == 8 and back.model.layout == "EttttttL"
    assert isinstance(back.parallel, Parallel) and (back.parallel.pp, back.parallel.vpp) == (2, 2)
    assert back.parallel.placement_style == "loop" and back.parallel.cp is None and back.parallel.cp_size == 1
    assert isinstance(back.microbatches, Microbatches) and (back.microbatches.count, back.microbatches.size) == (4, 1)
    assert all(isinstance(s, Stage) for s in back.stages) and back.stages[1].layers == (2, 4)
    assert back.parallel["pp"] == 2 and back.parallel.get("cp", 1) == 1 and "cp" not in back.parallel
    assert back.stages[0]["layers"] == [0, 2] and dict(back.microbatches) == {"count": 4, "size": 1}
    with pytest.raises(FrozenInstanceError):
        back.parallel.pp = 3  # type: ignore[misc]


def test_plan_parts_keep_keys_they_do_not_know_in_order(plan):
    data = json.loads(plan.to_json())
    data["parallel"] = {"tp": 1, "ep": 1, "dp": 1, "cp": 2, "pp": 2, "vpp": 2, "placement": "loop", "note": "x"}
    data["stages"][0]["label"] = "first"
    back = Plan.from_dict(data)
    assert back.parallel.other == {"note": "x"} and back.parallel.cp_size == 2
    assert list(back.to_dict()["parallel"]) == list(data["parallel"])
    assert back.to_dict()["stages"][0] == {"stage": 0, "rank": 0, "layers": [0, 2], "label": "first"}
    assert Plan.from_dict(back.to_dict()).to_json() == back.to_json()
