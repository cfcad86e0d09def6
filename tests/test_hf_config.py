"""Hugging Face configs of more families: ModelSpec, and the reduced transformers config."""

from __future__ import annotations

import pytest

from planner.core.errors import InputError
from planner.core.hf_config import load_model, model_from_config

MIXTRAL = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_local_experts": 8,
           "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 32000}
QWEN2_MOE = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
             "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 60,
             "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_attention_heads": 16,
             "num_key_value_heads": 16, "vocab_size": 151936}
DEEPSEEK_V2 = {"model_type": "deepseek_v2", "hidden_size": 5120, "intermediate_size": 12288,
               "moe_intermediate_size": 1536, "num_hidden_layers": 60, "num_attention_heads": 128,
               "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 160, "n_shared_experts": 2,
               "num_experts_per_tok": 6, "n_group": 8, "topk_group": 3, "first_k_dense_replace": 1,
               "vocab_size": 102400}


def test_mixtral_experts_take_the_intermediate_size():
    spec = model_from_config(MIXTRAL, name="mixtral")
    assert (spec.moe.num_experts, spec.moe.top_k, spec.moe.expert_intermediate) == (8, 2, 14336)
    assert spec.moe.shared_intermediate == 0
    assert [layer.type_key for layer in spec.layers[1:3]] == ["gqa+moe", "gqa+moe"]


def test_qwen2_moe_has_a_gated_shared_expert():
    spec = model_from_config(QWEN2_MOE, name="qwen2")
    assert (spec.moe.num_experts, spec.moe.shared_intermediate, spec.moe.shared_gate) == (60, 5632, True)


def test_deepseek_v2_reads_like_v3():
    spec = model_from_config(DEEPSEEK_V2, name="v2")
    assert spec.mla.q_lora_rank == 1536 and spec.moe.shared_intermediate == 2 * 1536
    assert spec.layers[1].ffn == "dense" and spec.layers[2].ffn == "moe"


def test_unknown_model_type_names_the_supported_ones():
    with pytest.raises(InputError, match="supported: .*qwen2_moe.*mixtral.*deepseek_v2") as exc:
        model_from_config({"model_type": "gpt2"}, name="x")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("raw", [MIXTRAL, QWEN2_MOE, DEEPSEEK_V2], ids=lambda r: r["model_type"])
def test_reduced_transformers_config_has_the_scaled_widths(raw):
    pytest.importorskip("transformers")
    from profiler.hf.config import EXPERT_COUNT_KEY, hf_config
    from profiler.layers import scaled_model

    small = scaled_model(model_from_config(raw, name="m"), 1 / 16)
    cfg = hf_config(raw, small)
    assert cfg.hidden_size == small.hidden and cfg.vocab_size == small.vocab
    assert getattr(cfg, EXPERT_COUNT_KEY[raw["model_type"]]) == small.moe.num_experts
    assert cfg.num_experts_per_tok == small.moe.top_k
    expert_width = cfg.intermediate_size if raw["model_type"] == "mixtral" else cfg.moe_intermediate_size
    assert expert_width == small.moe.expert_intermediate
    if raw["model_type"] == "deepseek_v2":  # groups still divide the 10 experts left
        assert small.moe.num_experts % cfg.n_group == 0 and cfg.topk_group <= cfg.n_group


def test_shipped_qwen3_next_keeps_its_layer_pattern():
    pytest.importorskip("transformers")
    from profiler.hf.config import hf_config, raw_config
    from profiler.layers import scaled_model

    spec = load_model("qwen3-next-80b-a3b")
    cfg = hf_config(raw_config(spec), scaled_model(spec, 1 / 16))
    mixers = [layer.mixer for layer in spec.layers if layer.role == "decoder"]
    assert [t == "full_attention" for t in cfg.layer_types] == [m == "gqa" for m in mixers]
