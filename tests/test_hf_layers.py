"""transformers' own decoder layers cut into ppplan layer programs (``profiler.hf``).

Each test builds one layer type at a small width and seq 16, a fraction of a second.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from planner.core.hf_config import load_model, model_from_config  # noqa: E402
from profiler.hf import build_hf_layer, layer_source  # noqa: E402
from profiler.hf.config import raw_config  # noqa: E402
from profiler.layers import layer_input, run_program  # noqa: E402

SCALE = 1 / 32
MOE_MODELS = ("qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3")
OTHER_FAMILIES = {  # small configs of families no shipped model uses (fields as in their config.json)
    "qwen2_moe": {"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 128,
                  "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, "num_experts": 6,
                  "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "num_key_value_heads": 4, "vocab_size": 128},
    "mixtral": {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96, "num_local_experts": 4,
                "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "vocab_size": 128},
    "deepseek_v2": {"model_type": "deepseek_v2", "hidden_size": 64, "intermediate_size": 128,
                    "moe_intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
                    "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 8, "n_shared_experts": 1,
                    "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2,
                    "topk_method": "group_limited_greedy", "first_k_dense_replace": 1, "vocab_size": 128},
}


def _types(spec):
    seen = {}
    for layer in spec.layers:
        seen.setdefault(layer.type_key, layer)
    return seen


def _own_forward(module, x):
    """The transformers layer's own ``forward`` (its MoE block's eager experts loop)."""
    positions = torch.arange(x.shape[1])[None]
    return module.layer(x, attention_mask=None, position_ids=positions,
                        position_embeddings=module.rotary(x, positions))


def _cases():
    for name in MOE_MODELS:
        spec = load_model(name)
        for t, layer in _types(spec).items():
            if layer.role == "decoder":
                yield pytest.param(spec, raw_config(spec), layer, SCALE, id=f"{name}-{t}")
    for family, raw in OTHER_FAMILIES.items():
        spec = model_from_config(raw, name=family)
        for t, layer in _types(spec).items():
            if layer.role == "decoder":
                yield pytest.param(spec, raw, layer, 1.0, id=f"{family}-{t}")
    spec = model_from_config(OTHER_FAMILIES["mixtral"], name="mixtral")  # widths of 4 and 6: padded GEMM
    yield pytest.param(spec, OTHER_FAMILIES["mixtral"], spec.layers[1], 1 / 16, id="mixtral-unaligned")


@pytest.mark.parametrize("spec,raw,layer,scale", list(_cases()))
def test_program_equals_the_transformers_layer(spec, raw, layer, scale):
    """Cut into attention+router | experts (grouped GEMM) | shared expert+residual, the
    layer computes what transformers' own forward computes, and its gradients flow."""
    module = build_hf_layer(spec, layer, raw=raw, scale=scale)
    x = layer_input(spec, layer, scale=scale, batch=1, seq_len=16)
    y = run_program(module.program(), x)
    with torch.no_grad():
        torch.testing.assert_close(y, _own_forward(module, x), rtol=1e-4, atol=1e-5)
    y.square().mean().backward()
    assert all(p.grad is not None for p in module.parameters() if p.requires_grad)
    assert type(module.layer).__module__.startswith("transformers.models.")


def test_experts_are_one_grouped_gemm_pair_whatever_the_expert_count(monkeypatch):
    """No Python loop over experts: the experts segment calls the grouped GEMM twice
    (gate/up, down) for 4 experts as for 16."""
    calls = []
    real = torch.nn.functional.grouped_mm

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "grouped_mm", counting)
    for experts in (4, 16):
        raw = dict(OTHER_FAMILIES["qwen2_moe"], num_experts=experts)
        spec = model_from_config(raw, name="q")
        module = build_hf_layer(spec, spec.layers[1], raw=raw)
        calls.clear()
        run_program(module.program(), layer_input(spec, spec.layers[1], batch=1, seq_len=16)).sum().backward()
        assert len(calls) == 2


def test_each_layer_type_names_its_library_version_and_class():
    import transformers

    spec = load_model("deepseek-v3")
    raw = raw_config(spec)
    got = {t: layer_source(spec, layer, raw=raw, modules="transformers", scale=SCALE)
           for t, layer in _types(spec).items()}
    assert got["mla+moe"] == {"library": "transformers", "version": transformers.__version__,
                              "class": "DeepseekV3DecoderLayer"}
    assert got["head"]["class"] == "DeepseekV3RMSNorm + torch.nn.Linear"
    assert got["mtp:mla+moe"]["library"] == "ppplan"  # transformers has no MTP layer: native
    native = layer_source(spec, spec.layers[5], raw=raw, modules="native")
    assert native["class"] == "profiler.layers.blocks.DecoderLayer"


def test_widths_match_the_native_modules():
    """Same reduced config, same shapes: the parameter counts of the two module sources
    agree up to the norms each family adds (Qwen3's per-head q/k norms, DeepSeek's none)."""
    from profiler.layers import build_layer

    spec = load_model("qwen3-30b-a3b")
    layer = spec.layers[1]
    hf = build_hf_layer(spec, layer, raw=raw_config(spec), scale=SCALE)
    native = build_layer(spec, layer, scale=SCALE)
    assert sum(p.numel() for p in hf.parameters()) == sum(p.numel() for p in native.parameters())
    assert hf.layer.mlp.experts.gate_up_proj.shape == native.moe.w_gate_up.shape


def test_side_by_side_comparison_times_both_sources_per_type():
    """``profiler.hf.ab``: every layer type measured from both sources, in thread CPU time."""
    from profiler.hf.ab import ThreadClock, compare_sources

    raw = OTHER_FAMILIES["mixtral"]
    rows = compare_sources(model_from_config(raw, name="m"), raw=raw, scale=1.0, seq_len=16, rounds=2, repeats=1)
    assert set(rows) == {"embedding", "gqa+moe", "head"}
    moe = rows["gqa+moe"]
    assert all(moe[s]["f"] > 0 and moe[s]["experts_f"] > 0 for s in ("transformers", "native"))
    assert moe["ratio"]["f"] > 0
    assert rows["embedding"]["ratio"]["i"] is None  # token ids: no I on either side
    clock = ThreadClock()
    start = clock.mark()
    torch.randn(256, 256) @ torch.randn(256, 256)
    assert 0 < clock.elapsed(start, clock.mark()) < 5
