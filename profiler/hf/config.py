"""A transformers config for a model at a reduced width.

``hf_config(raw, spec)`` starts from the model's own ``config.json`` (``raw``, the
shipped ``planner/data/models/*.json`` or the user's file) and overwrites every width
and count (heads, experts, expert groups, shared experts) with the reduced-width
``ModelSpec`` (``profiler.layers.scaled_model``, which keeps them whole), so the
transformers layers and ppplan's native ones have the same shapes; everything else
(rope settings, ``norm_topk_prob``, ``routed_scaling_factor``, layer pattern) stays
as the file says. The config is made with ``AutoConfig.for_model``.

The field names per family follow each family's ``configuration_*.py`` in
transformers (``models/qwen3_moe``, ``qwen2_moe``, ``qwen3_next``, ``mixtral``,
``deepseek_v2``, ``deepseek_v3``, ``llama``, ``qwen2``, ``qwen3``, ``mistral``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.core.jsonio import read_json
from planner.core.model import ModelSpec
from planner.core.paths import MODELS_DIR, SHIPPED_MODELS

__all__ = ["hf_config", "raw_config", "EXPERT_COUNT_KEY"]

EXPERT_COUNT_KEY = {"qwen3_moe": "num_experts", "qwen2_moe": "num_experts", "qwen3_next": "num_experts",
                    "mixtral": "num_local_experts", "deepseek_v2": "n_routed_experts",
                    "deepseek_v3": "n_routed_experts"}
"""Routed-expert count field of each MoE family's config."""

_DROP = ("torch_dtype", "dtype", "architectures", "auto_map", "transformers_version", "quantization_config")


def raw_config(model: ModelSpec, config_path: str | Path | None = None) -> dict[str, Any]:
    """The parsed config.json of ``model``: ``config_path`` when given, else the shipped file."""
    if config_path is not None:
        return read_json(Path(config_path), what="model config")
    if model.name in SHIPPED_MODELS:
        return read_json(MODELS_DIR / f"{model.name}.json", what="model config")
    raise InputError("model", f"{model.name!r} is not shipped and no config.json was given",
                     "pass the model as a path to its config.json")


def _attention(spec: ModelSpec) -> dict[str, Any]:
    a = spec.attention
    return {"num_attention_heads": a.num_heads, "num_key_value_heads": a.num_kv_heads, "head_dim": a.head_dim}


def _mla(spec: ModelSpec) -> dict[str, Any]:
    m, moe = spec.mla, spec.moe
    out = {"num_attention_heads": m.num_heads, "num_key_value_heads": m.num_heads,
           "q_lora_rank": m.q_lora_rank or None, "kv_lora_rank": m.kv_lora_rank,
           "qk_nope_head_dim": m.qk_nope_head_dim, "qk_rope_head_dim": m.qk_rope_head_dim,
           "v_head_dim": m.v_head_dim, "head_dim": m.qk_rope_head_dim}
    if moe is not None:  # the spec's shared expert is n_shared_experts routed experts wide
        out |= {"moe_intermediate_size": moe.expert_intermediate,
                "n_shared_experts": moe.shared_intermediate // moe.expert_intermediate,
                "n_group": max(moe.expert_groups, 1), "topk_group": max(moe.groups_per_token, 1)}
    return out


def _moe(mtype: str, spec: ModelSpec) -> dict[str, Any]:
    moe = spec.moe
    out: dict[str, Any] = {EXPERT_COUNT_KEY[mtype]: moe.num_experts, "num_experts_per_tok": moe.top_k}
    if mtype == "mixtral":  # Mixtral's intermediate_size is its experts' (configuration_mixtral.py)
        return out | {"intermediate_size": moe.expert_intermediate}
    if mtype.startswith("deepseek"):
        return out
    out["moe_intermediate_size"] = moe.expert_intermediate
    if moe.shared_intermediate:
        out["shared_expert_intermediate_size"] = moe.shared_intermediate
    return out


def _linear(spec: ModelSpec) -> dict[str, Any]:
    lin = spec.linear
    return {"linear_num_key_heads": lin.num_key_heads, "linear_key_head_dim": lin.key_head_dim,
            "linear_num_value_heads": lin.num_value_heads, "linear_value_head_dim": lin.value_head_dim,
            "linear_conv_kernel_dim": lin.conv_kernel}


def hf_config(raw: dict[str, Any], spec: ModelSpec) -> Any:
    """``AutoConfig.for_model`` of ``raw``'s family with ``spec``'s (reduced) widths."""
    from transformers import AutoConfig

    mtype = raw["model_type"]
    fields = {k: v for k, v in raw.items() if k not in _DROP and k != "model_type"}
    fields |= {"hidden_size": spec.hidden, "vocab_size": spec.vocab}
    if spec.intermediate:
        fields["intermediate_size"] = spec.intermediate
    if spec.mla is not None:
        fields |= _mla(spec)
    elif spec.attention is not None:
        fields |= _attention(spec)
    if spec.moe is not None:
        fields |= _moe(mtype, spec)
    if spec.linear is not None:
        fields |= _linear(spec)
    cfg = AutoConfig.for_model(mtype, **fields)
    cfg._attn_implementation = "sdpa"
    return cfg
