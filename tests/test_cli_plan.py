"""``ppplan plan MODEL`` with no other option: a feasible, validator-clean plan for every
shipped model; ``ppplan simulate`` and ``ppplan validate`` on it."""

from __future__ import annotations

import json
import re

import pytest

from planner.core.paths import SHIPPED_MODELS
from plan_helpers import without_wall_s


@pytest.mark.parametrize("model", SHIPPED_MODELS)
def test_plan_each_shipped_model_with_defaults(ppplan, tmp_path, model):
    result = ppplan("plan", model)
    assert result.code == 0, result.err
    assert all(line.startswith(f"planning {model} ") for line in result.err.splitlines()), result.err  # progress only
    assert "wrote plan.json" in result.out and "predicted step" in result.out
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["model"]["name"] == model
    pred = data["predicted"]
    assert pred["memory_limit_bytes"] > 0
    assert max(pred["peak_memory_bytes"]) <= pred["memory_limit_bytes"]
    assert pred["step_time_s"] > 0 and 0 <= pred["bubble_fraction"] < 1 and 0 < pred["mfu"] < 1
    for name in ("uniform", "flops_balanced"):
        assert name in data["baselines"]
    valid = ppplan("validate", "plan.json")
    assert valid.code == 0, valid.err
    assert valid.out.strip() == "plan.json: valid"


def test_plan_without_model_plans_the_default(ppplan, tmp_path):
    result = ppplan("plan")
    assert result.code == 0, result.err
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["model"]["name"] == "qwen3-next-80b-a3b"
    sim = ppplan("simulate", "plan.json", "--json")
    assert sim.code == 0, sim.err
    report = json.loads(sim.out)
    assert report["step_time_s"] == pytest.approx(data["predicted"]["step_time_s"], rel=1e-12)
    assert report["peak_memory_bytes"] == data["predicted"]["peak_memory_bytes"]
    text = ppplan("simulate", "plan.json")
    assert text.code == 0 and text.out.startswith("step ") and "critical path:" in text.out


def test_same_inputs_same_plan(ppplan, tmp_path):
    first = ppplan("plan", "qwen3-30b-a3b", "--out", "a.json", "--json")
    second = ppplan("plan", "qwen3-30b-a3b", "--out", "b.json", "--json")
    assert first.code == second.code == 0
    a, b = (without_wall_s(json.loads((tmp_path / f).read_text())) for f in ("a.json", "b.json"))
    assert a == b  # the whole plan, search trace and budget record included (timings aside)
    assert json.loads(first.out)["schedule"] == a["schedule"]


def test_validate_invalid_plan_exits_1_with_marked_grid(ppplan, tmp_path):
    assert ppplan("plan", "llama3-8b").code == 0
    data = json.loads((tmp_path / "plan.json").read_text())
    acts = data["schedule"]["2"]
    # the first input-gradient (B, or I where the plan splits B into I and W), not in a fused pair
    k = next(p for p, a in enumerate(acts) if re.fullmatch(r"\d+[BI]\d+", a))
    forward = next(p for p, a in enumerate(acts) if a == re.sub(r"[BI]", "F", acts[k]))
    acts[k], acts[forward] = acts[forward], acts[k]  # a backward before its own forward
    (tmp_path / "bad.json").write_text(json.dumps(data))
    result = ppplan("validate", "bad.json")
    assert result.code == 1
    lines = result.err.splitlines()
    assert lines[0] == "bad.json: INVALID"
    assert lines[1].startswith(f"rank 2, position {forward} ({acts[forward]}): runs before its predecessor")
    marked = [line for line in lines if f">{acts[forward]}<" in line]
    assert len(marked) == 1 and marked[0].strip().startswith("2 |")
    assert "Traceback" not in result.err
