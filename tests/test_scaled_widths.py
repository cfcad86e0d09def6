"""Every shipped model at any ``--scale``: whole for transformers' config classes and layers
and for the native ones, or one line naming the smallest scale that works.

Each case builds one layer of every type at a tiny width and runs it on 8 tokens.
"""

from __future__ import annotations

import json

import pytest
import torch

from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.paths import SHIPPED_MODELS
from profiler.hf import available
from profiler.layers import build_layer, layer_input, scaled_model
from profiler.layers.scaling import minimum_scale

SCALES = (1 / 16, 0.0337, 0.03, 0.01, 0.005, 0.003, 1e-3, 1e-7)
SOURCES = ("transformers", "native")
FAST = ("--seq-len", "16", "--repeats", "1", "--warmup", "0", "--no-links", "--quiet")


def _types(model):
    seen = {}
    for layer in model.layers:
        seen.setdefault(layer.type_key, layer)
    return seen.values()


def _assert_whole(model, spec) -> None:
    """The divisibilities transformers' configs and layers rely on."""
    heads = spec.attention or spec.mla
    assert spec.hidden % heads.num_heads == 0
    if spec.attention:
        a = spec.attention
        assert a.num_heads % a.num_kv_heads == 0 and a.head_dim % 2 == 0 and a.head_dim >= 2
        if model.attention.num_heads * model.attention.head_dim == model.hidden:
            assert a.num_heads * a.head_dim == spec.hidden
    if spec.mla:
        m = spec.mla
        assert min(m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) >= 2 and m.kv_lora_rank >= 1
        assert m.q_lora_rank >= 1 or not model.mla.q_lora_rank
    if spec.linear:
        lin = spec.linear
        assert lin.num_value_heads % lin.num_key_heads == 0 and lin.key_head_dim % 2 == 0
    if spec.moe:
        moe, full = spec.moe, model.moe
        assert 1 <= moe.top_k <= moe.num_experts and moe.expert_intermediate >= 1
        if full.shared_intermediate:
            assert moe.shared_intermediate * full.expert_intermediate == full.shared_intermediate * moe.expert_intermediate
        if moe.expert_groups:
            assert moe.num_experts % moe.expert_groups == 0 and moe.num_experts // moe.expert_groups >= 2
            assert moe.groups_per_token <= moe.expert_groups


def _build(model, layer, scale: float, source: str):
    if source == "native":
        return build_layer(model, layer, scale=scale)
    from profiler.hf import build_hf_layer
    from profiler.hf.config import raw_config

    return build_hf_layer(model, layer, raw=raw_config(model), scale=scale)


def _check_config(model, spec) -> None:
    """transformers' own config class accepts the widths and holds them."""
    from profiler.hf.config import hf_config, raw_config

    cfg = hf_config(raw_config(model), spec)
    heads = spec.attention or spec.mla
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.vocab_size) == (spec.hidden, heads.num_heads, spec.vocab)
    if spec.attention:
        assert (cfg.num_key_value_heads, cfg.head_dim) == (spec.attention.num_kv_heads, spec.attention.head_dim)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("scale", SCALES, ids=lambda s: f"{s:g}")
@pytest.mark.parametrize("name", sorted(SHIPPED_MODELS))
def test_a_shipped_model_is_whole_at_a_scale_or_the_error_names_the_smallest(name, scale, source):
    if source == "transformers" and not available():
        pytest.skip("transformers is not installed")
    model = load_model(name)
    least = minimum_scale(model)
    if scale < least:
        with pytest.raises(InputError, match=rf"^--scale: {scale:g} is too small for {name}: .* "
                                             rf"\(use --scale {least:g} or more\)$"):
            scaled_model(model, scale)
        with pytest.raises(InputError, match="too small"):  # the smallest: a tenth less does not work
            scaled_model(model, least * 0.9)
        scale = least  # and the scale the error names does
    spec = scaled_model(model, scale)
    _assert_whole(model, spec)
    if source == "transformers":
        _check_config(model, spec)
    with torch.no_grad():
        for layer in _types(model):
            y = _build(model, layer, scale, source)(layer_input(model, layer, scale=scale, batch=1, seq_len=8))
            assert y.shape == (1, 8, spec.vocab if layer.role == "head" else spec.hidden), (layer.type_key, source)
            assert torch.isfinite(y).all()


def _assert_one_line_scale_error(res, name: str, least: float) -> None:
    assert res.code == 2, (res.code, res.err)
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --scale: "), res.err
    assert f"too small for {name}" in lines[0] and f"use --scale {least:g} or more" in lines[0]


@pytest.mark.skipif(not available(), reason="transformers is not installed")
def test_profile_llama_at_0_03_on_transformers_layers(ppplan, tmp_path):
    """hidden 4096 x 0.03 is not a multiple of the 4 heads left: the widths keep it one."""
    res = ppplan("profile", "llama3-8b", "--device", "cpu", "--scale", "0.03", "--modules", "transformers",
                 *FAST, "--out", "l.json")
    assert res.code == 0, res.err
    table = json.loads((tmp_path / "l.json").read_text())
    assert table["scale"] == 0.03 and table["meta"]["modules"]["layers"]["gqa+dense"]["class"] == "LlamaDecoderLayer"


@pytest.mark.parametrize("modules", SOURCES)
def test_profile_at_a_scale_too_small_is_one_line_naming_the_smallest(ppplan, tmp_path, modules):
    if modules == "transformers" and not available():
        pytest.skip("transformers is not installed")
    res = ppplan("profile", "llama3-8b", "--device", "cpu", "--scale", "1e-7", "--modules", modules, *FAST,
                 "--out", "l.json")
    _assert_one_line_scale_error(res, "llama3-8b", minimum_scale(load_model("llama3-8b")))
    assert not (tmp_path / "l.json").exists()


@pytest.mark.skipif(not available(), reason="transformers is not installed")
def test_replay_on_transformers_layers_at_a_profile_scale(ppplan, tmp_path):
    """The replay builds its stages at the profile's scale: whole at 0.03, one line at 1e-7."""
    from planner.api import load_plan
    from planner.replay.lowering import build_stage, replay_model

    assert ppplan("plan", "llama3-8b", "--pp", "2", "--quiet", "--out", "plan.json").code == 0
    plan = load_plan(tmp_path / "plan.json")
    rm = replay_model(plan, scale=0.03, seq_len=8, modules="transformers")
    stage = build_stage(rm, 0, 3, torch.device("cpu"))
    assert type(stage.layers["1"].layer).__name__ == "LlamaDecoderLayer"
    with torch.no_grad():
        assert stage(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, rm.spec.hidden)
    res = ppplan("replay", "plan.json", "--modules", "transformers", "--scale", "1e-7", "--out", "r.json")
    _assert_one_line_scale_error(res, "llama3-8b", minimum_scale(load_model("llama3-8b")))
    assert not (tmp_path / "r.json").exists()
