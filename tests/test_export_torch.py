"""torch-csv and torchtitan exports, checked with torch's own loader, validator and lowering."""

from __future__ import annotations

import copy
import csv
import io
import types

import pytest
from torch.distributed.pipelining.schedules import (_Action, _add_send_recv, _PipelineScheduleRuntime,
                                                    _validate_schedule)

from planner.core.placement import stage_ranks
from planner.export import ExportError, export_plan
from planner.export.pipelining import module_fqns, torchtitan_schedule_name
from test_export_plans import CASES, SHIPPED, build_plan, case_plan, default_plan, staged_gpipe


def _torch_round_trip(plan, tmp_path) -> dict[int, int]:
    """Load the CSV the way torch does; returns torch's stage -> rank map."""
    text = plan.torch_csv()
    rows = list(csv.reader(io.StringIO(text)))
    actions = {r: [_Action.from_str(c) for c in row] for r, row in enumerate(rows)}
    for r, row in enumerate(rows):
        assert [str(a) for a in actions[r]] == row == [str(a) for a in plan.actions(r)]
    mapping = _validate_schedule(actions, plan.pp, plan.num_stages, plan.num_microbatches)
    lowered = _add_send_recv(copy.deepcopy(actions), lambda s: mapping[s], plan.num_stages)
    assert sum(a.is_compute_op for acts in lowered.values() for a in acts) == \
        sum(len(acts) for acts in actions.values())
    path = tmp_path / "schedule.csv"
    path.write_text(text)
    stage = types.SimpleNamespace(num_stages=plan.num_stages, group_size=plan.pp, group_rank=0,
                                  stage_index_to_group_rank=None)
    runtime = _PipelineScheduleRuntime([stage], n_microbatches=plan.num_microbatches)
    runtime._load_csv(str(path))
    assert runtime.stage_index_to_group_rank == mapping
    return mapping


@pytest.mark.parametrize("model", SHIPPED)
def test_default_plan_csv_loads_in_torch(model, tmp_path):
    plan = default_plan(model)
    mapping = _torch_round_trip(plan, tmp_path)
    assert [mapping[s] for s in range(plan.num_stages)] == plan.ranks()


@pytest.mark.parametrize("name", CASES)
def test_case_csv_loads_in_torch_with_its_placement(name, tmp_path):
    plan = case_plan(name)
    mapping = _torch_round_trip(plan, tmp_path)
    assert [mapping[s] for s in range(plan.num_stages)] == plan.ranks()


def test_csv_refuses_an_invalid_schedule():
    plan = copy.deepcopy(case_plan("uniform"))
    plan.schedule["0"] = plan.schedule["0"][1:]  # drop 0F0
    with pytest.raises(ExportError, match=r"export --format torch-csv: the plan's schedule is invalid"):
        plan.torch_csv()


@pytest.mark.parametrize("name, expected", [("uniform", "1F1B"), ("uneven", "1F1B"),
                                            ("vpp2", "Interleaved1F1B"), ("v", "ZBVZeroBubble"),
                                            ("w_moved", "1F1B"), ("gpipe", "1F1B")])
def test_torchtitan_schedule_name_matches_placement(name, expected):
    assert torchtitan_schedule_name(case_plan(name)) == expected


def test_torchtitan_interleaved_zero_bubble_for_split_w_with_vpp():
    from solvers.schedule.families.generators import interleaved_1f1b

    plan = build_plan("llama3-8b", pp=2, vpp=2, schedule=interleaved_1f1b(2, 2, 4, split_w=True),
                      microbatches=4, name="interleaved-split")
    assert torchtitan_schedule_name(plan) == "InterleavedZeroBubble"


@pytest.mark.parametrize("name, match", [
    ("fused", r"OVERLAP_F_B pairs, which torchtitan's CSV runtime runs one after the other"),
    ("mtp", r"layer 49 is an MTP layer and torchtitan runs MTP only without pipeline parallelism"
            r".*num_nextn_predict_layers"),
    ("custom", r"stage-to-rank map \[1, 0\] is neither loop nor V"),
    ("fused_pp1_split", r"pp is 1: torchtitan builds no pipeline stages"),
])
def test_torchtitan_refuses(name, match):
    with pytest.raises(ExportError, match=match):
        case_plan(name).torchtitan_options()


def test_torchtitan_refuses_v_with_three_stages_per_rank():
    plan = build_plan("llama3-8b", pp=2, vpp=3, placement="v", microbatches=4,
                      schedule=staged_gpipe(stage_ranks(6, 2, "v"), 4), name="gpipe-v3")
    with pytest.raises(ExportError, match=r"V placement with 3 stages per rank; torchtitan's V schedules hold exactly 2"):
        torchtitan_schedule_name(plan)


@pytest.mark.parametrize("name", ["uniform", "uneven", "vpp2", "v"])
def test_module_fqns_follow_the_partition(name):
    plan = case_plan(name)
    parts = module_fqns(plan)
    assert len(parts) == plan.num_stages
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
    flat = [n for part in parts for n in part if n.startswith("layers.")]
    assert flat == [f"layers.{k}" for k in range(plan.model["layout"].count("t"))]
    for part, (a, b) in zip(parts, plan.bounds()):
        layout = plan.model["layout"][a:b]
        assert len(part) == b - a + layout.count("L")  # the head is norm + lm_head


def _assigned(source: str) -> dict:
    """Top-level ``NAME = literal`` assignments of a Python module."""
    import ast

    return {node.targets[0].id: ast.literal_eval(node.value) for node in ast.parse(source).body
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Constant))}


def test_torchtitan_files_and_config(tmp_path):
    plan = case_plan("v")
    out = export_plan(plan, "torchtitan", out=tmp_path / "tt.py")
    module_path, csv_path = list(out.files)
    assert csv_path == str(tmp_path / "tt.csv")
    assert out.files[csv_path] == plan.torch_csv()
    cfg = _assigned(out.files[module_path])
    assert cfg["STAGE_MODULES"] == module_fqns(plan)
    size = plan.microbatches["size"]
    for form, batch in (("0.3", {"pipeline_parallel_microbatch_size": size}),
                        ("main", {"num_pp_microbatches": plan.num_microbatches})):
        par = out.summary["fields"][form]["parallelism"]
        assert par["pipeline_parallel_schedule"] == "ZBVZeroBubble"
        assert par["pipeline_parallel_schedule_csv"] == csv_path
        assert par["pipeline_parallel_degree"] == 2
        assert par["module_fqns_per_model_part"] == module_fqns(plan)
        assert {k: par[k] for k in batch} == batch
        assert out.summary["fields"][form]["training"]["disable_cuda_graphs"] is True
        assert "--training.disable_cuda_graphs" in out.summary["overrides"][form]
    assert out.summary["fields"]["0.3"]["training"]["local_batch_size"] == plan.num_microbatches * size
    assert "--parallelism.pipeline_parallel_schedule" in out.summary["overrides"]["0.3"]
    assert cfg["ACTIVATION_CHECKPOINT"] == out.summary["activation_checkpoint"]
