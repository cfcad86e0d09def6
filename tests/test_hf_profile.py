"""``ppplan profile --modules`` and ``ppplan replay --modules transformers``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parent))
from test_replay_run import make_plan, tiny_config  # noqa: E402  (same tests folder)

TINY = ("--scale", "0.03125", "--seq-len", "16", "--repeats", "1", "--warmup", "0", "--no-links", "--quiet")


def test_profile_measures_transformers_layers_by_default_and_records_them(ppplan, tmp_path):
    import transformers

    res = ppplan("profile", "qwen3-30b-a3b", *TINY, "--out", "hf.json")
    assert res.code == 0, res.err
    meta = json.loads((tmp_path / "hf.json").read_text())["meta"]["modules"]
    assert meta["source"] == "transformers"
    assert meta["layers"]["gqa+moe"] == {"library": "transformers", "version": transformers.__version__,
                                         "class": "Qwen3MoeDecoderLayer"}
    native = json.loads((tmp_path / "hf.json").read_text())
    native["meta"]["modules"] = {"source": "native", "layers": {}}
    (tmp_path / "native.json").write_text(json.dumps(native))
    res = ppplan("profile", "--compare", "hf.json", "native.json")
    assert res.code == 0 and "A (transformers)" in res.out and "B (native)" in res.out


def test_profile_refuses_capacity_mode_on_transformers_modules(ppplan):
    res = ppplan("profile", "qwen3-30b-a3b", *TINY, "--modules", "transformers",
                 "--moe-expert-capacity-factor", "1.0")
    assert res.code != 0 and "--modules native" in res.err


def test_capacity_flags_without_modules_measure_the_native_modules(ppplan, tmp_path):
    res = ppplan("profile", "qwen3-30b-a3b", *TINY, "--moe-expert-capacity-factor", "1.0", "--out", "c.json")
    assert res.code == 0, res.err
    assert json.loads((tmp_path / "c.json").read_text())["meta"]["modules"]["source"] == "native"


def test_profile_a_config_json_no_shipped_model_uses(ppplan, tmp_path):
    path = tmp_path / "mix" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96,
                                "num_local_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}))
    res = ppplan("profile", str(path), *TINY[2:], "--modules", "transformers", "--out", "m.json")
    assert res.code == 0, res.err
    table = json.loads((tmp_path / "m.json").read_text())
    assert table["meta"]["modules"]["layers"]["gqa+moe"]["class"] == "MixtralDecoderLayer"
    assert len(table["layers"]) == 4


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pp2_x_ep2_replay_on_transformers_layers_matches_reference(ppplan, tmp_path):
    """4 gloo processes; stages built from transformers' Qwen3-Next layers, experts split
    over ppplan's all-to-alls, gradients equal to the single-process reference."""
    from solvers.schedule.families.generators import one_f_one_b

    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4, fuse=True), [(0, 4), (4, 7)])
    plan.save(tmp_path / "plan.json")
    res = ppplan("replay", "plan.json", "--modules", "transformers", "--ep", "2", "--threads", "1",
                 "--steps", "1", "--warmup", "0", "--timeout", "60", "--deadline", "280", "--out", "r.json")
    assert res.code == 0, res.err
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["grad_check"]["passed"], rep["grad_check"]
    assert rep["replay"]["expert_parallel"]["ep"] == 2 and rep["replay"]["modules"] == "transformers"


def test_replay_stages_and_reference_are_built_from_transformers(tmp_path):
    """In process: the replay's stages (and so its single-process reference) hold
    transformers' decoder layers, whose expert weights the EP gradient merge recognises."""
    import torch

    from planner.replay.lowering import is_expert_param
    from planner.replay.lowering import build_stage, replay_model
    from profiler.hf.layers import HfDecoderLayer
    from solvers.schedule.families.generators import one_f_one_b

    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)])
    rm = replay_model(plan, scale=1.0, seq_len=16, modules="transformers")
    stage = build_stage(rm, 0, 4, torch.device("cpu"))
    assert type(stage.layers["1"].layer).__name__ == "Qwen3NextDecoderLayer"
    assert isinstance(stage.layers["1"], HfDecoderLayer)
    experts = [n for n, _ in stage.named_parameters() if is_expert_param(n)]
    assert experts and all(".experts." in n for n in experts)
