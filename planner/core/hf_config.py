"""Build a ``ModelSpec`` from a Hugging Face ``config.json``.

Supported families (by ``model_type``): Llama-style dense (``llama``, ``mistral``,
``qwen2``, ``qwen3``), ``qwen3_moe``, ``qwen2_moe``, ``mixtral``, ``qwen3_next``,
``deepseek_v2``, ``deepseek_v3``. Mixtral's ``intermediate_size`` is its experts' width
and its expert count is ``num_local_experts``; Qwen2-MoE gates its shared expert like
Qwen3-Next; DeepSeek-V2 reads like V3 (its softmax router only changes which experts win). Field names
follow the public configs (each model's Hugging Face ``config.json``); the shipped ones are
in ``planner/data/models/``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.core.jsonio import read_json
from planner.core.limits import check_config_value
from planner.core.model import (
    AttentionSpec,
    LayerSpec,
    LinearAttentionSpec,
    MlaSpec,
    ModelSpec,
    MoeSpec,
)
from planner.core.paths import MODELS_DIR, SHIPPED_MODELS

__all__ = ["load_model", "model_from_config", "resolve_model_path"]

_DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
_SUPPORTED = (*_DENSE_TYPES, "qwen3_moe", "qwen2_moe", "mixtral", "qwen3_next", "deepseek_v2", "deepseek_v3")


def resolve_model_path(model: str) -> Path:
    """Map a shipped id or a path (file or folder holding ``config.json``) to a file."""
    if model in SHIPPED_MODELS:
        return MODELS_DIR / f"{model}.json"
    p = Path(model)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():
        raise InputError("model", f"unknown model id or missing file {model!r}",
                         f"use one of {', '.join(SHIPPED_MODELS)} or a path to a config.json")
    return p


def load_model(model: str) -> ModelSpec:
    """Load a shipped id or a config path into a ``ModelSpec``."""
    path = resolve_model_path(model)
    data = read_json(path, what="model config")
    name = model if model in SHIPPED_MODELS else _name_from_path(path)
    return model_from_config(data, name=name)


def _name_from_path(path: Path) -> str:
    stem = path.parent.name if path.name == "config.json" else path.stem
    return stem or os.fspath(path)


def _int(cfg: dict[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise InputError(f"config.{key}", "missing", f"add '{key}' to the config.json")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"config.{key}", f"expected a non-negative integer, got {value!r}")
    check_config_value(key, value)  # before any list of layers or experts is built
    return value


def _int_list(cfg: dict[str, Any], key: str) -> list[int]:
    value = cfg.get(key) or []
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise InputError(f"config.{key}", f"expected a list of layer indices, got {value!r:.60}")
    return value


def model_from_config(cfg: Any, *, name: str) -> ModelSpec:
    """Turn a parsed config.json into a ``ModelSpec``; unknown families are an ``InputError``."""
    if not isinstance(cfg, dict):
        raise InputError("config", "expected a JSON object")
    mtype = cfg.get("model_type")
    if mtype not in _SUPPORTED:
        raise InputError("config.model_type", f"unsupported {mtype!r}",
                         f"supported: {', '.join(_SUPPORTED)}")
    hidden = _int(cfg, "hidden_size")
    n_layers = _int(cfg, "num_hidden_layers")
    if hidden == 0 or n_layers == 0:
        raise InputError("config.num_hidden_layers" if n_layers == 0 else "config.hidden_size",
                         "must be positive")
    common: dict[str, Any] = dict(
        name=name,
        hidden=hidden,
        vocab=_int(cfg, "vocab_size"),
        intermediate=_int(cfg, "intermediate_size", 0),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )
    if mtype in ("deepseek_v2", "deepseek_v3"):
        return _deepseek(cfg, common, n_layers)
    attention = _attention(cfg, hidden)
    if mtype in _DENSE_TYPES:
        mixers = ["gqa"] * n_layers
        return _assemble(common | {"attention": attention}, mixers, ["dense"] * n_layers, 0)
    moe = MoeSpec(
        num_experts=_int(cfg, "num_local_experts" if mtype == "mixtral" else "num_experts"),
        top_k=_int(cfg, "num_experts_per_tok"),
        expert_intermediate=_int(cfg, "intermediate_size" if mtype == "mixtral" else "moe_intermediate_size"),
        shared_intermediate=_int(cfg, "shared_expert_intermediate_size", 0),
        shared_gate=mtype in ("qwen3_next", "qwen2_moe"),
    )
    _check_moe(moe)
    sparse_step = _int(cfg, "decoder_sparse_step", 1)
    mlp_only = set(_int_list(cfg, "mlp_only_layers"))
    ffns = ["moe" if (i not in mlp_only and (i + 1) % sparse_step == 0) else "dense"
            for i in range(n_layers)]
    if mtype in ("qwen3_moe", "qwen2_moe", "mixtral"):
        return _assemble(common | {"attention": attention, "moe": moe}, ["gqa"] * n_layers, ffns, 0)
    interval = _int(cfg, "full_attention_interval", 4)
    mixers = ["gqa" if (i + 1) % interval == 0 else "linear" for i in range(n_layers)]
    linear = LinearAttentionSpec(
        num_key_heads=_int(cfg, "linear_num_key_heads"),
        key_head_dim=_int(cfg, "linear_key_head_dim"),
        num_value_heads=_int(cfg, "linear_num_value_heads"),
        value_head_dim=_int(cfg, "linear_value_head_dim"),
        conv_kernel=_int(cfg, "linear_conv_kernel_dim", 4),
    )
    n_mtp = _int(cfg, "num_nextn_predict_layers", _int(cfg, "mtp_num_hidden_layers", 0))
    spec = common | {"attention": attention, "moe": moe, "linear": linear}
    return _assemble(spec, mixers, ffns, n_mtp, mtp_mixer="gqa")


def _attention(cfg: dict[str, Any], hidden: int) -> AttentionSpec:
    """Grouped-query attention: every key/value head serves heads / kv_heads query heads."""
    heads = _int(cfg, "num_attention_heads")
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    if kv_heads > heads or heads % kv_heads:
        raise InputError("config.num_key_value_heads", f"{kv_heads} key/value heads do not divide the "
                         f"{heads} attention heads", "give the model's own value (a divisor of num_attention_heads)")
    if "head_dim" not in cfg and hidden < heads:
        raise InputError("config.head_dim", f"missing, and hidden_size {hidden} / {heads} heads is below 1",
                         "add 'head_dim' to the config.json")
    return AttentionSpec(num_heads=heads, num_kv_heads=kv_heads, head_dim=_int(cfg, "head_dim", hidden // heads))


def _deepseek(cfg: dict[str, Any], common: dict[str, Any], n_layers: int) -> ModelSpec:
    mla = MlaSpec(
        num_heads=_int(cfg, "num_attention_heads"),
        q_lora_rank=_int(cfg, "q_lora_rank"),
        kv_lora_rank=_int(cfg, "kv_lora_rank"),
        qk_nope_head_dim=_int(cfg, "qk_nope_head_dim"),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim"),
        v_head_dim=_int(cfg, "v_head_dim"),
    )
    moe = MoeSpec(
        num_experts=_int(cfg, "n_routed_experts"),
        top_k=_int(cfg, "num_experts_per_tok"),
        expert_intermediate=_int(cfg, "moe_intermediate_size"),
        shared_intermediate=_int(cfg, "n_shared_experts", 0) * _int(cfg, "moe_intermediate_size"),
        expert_groups=_int(cfg, "n_group", 0),
        groups_per_token=_int(cfg, "topk_group", 0),
    )
    _check_moe(moe)
    first_dense = _int(cfg, "first_k_dense_replace", 0)
    if first_dense > n_layers:
        raise InputError("config.first_k_dense_replace", f"{first_dense} exceeds {n_layers} layers")
    ffns = ["dense" if i < first_dense else "moe" for i in range(n_layers)]
    n_mtp = _int(cfg, "num_nextn_predict_layers", 0)
    return _assemble(common | {"mla": mla, "moe": moe}, ["mla"] * n_layers, ffns, n_mtp, mtp_mixer="mla")


def _check_moe(moe: MoeSpec) -> None:
    if moe.num_experts == 0 or moe.top_k == 0 or moe.top_k > moe.num_experts:
        raise InputError("config.num_experts_per_tok",
                         f"top-k {moe.top_k} must be between 1 and the {moe.num_experts} experts")


def _assemble(spec: dict[str, Any], mixers: list[str], ffns: list[str], n_mtp: int,
              mtp_mixer: str = "gqa") -> ModelSpec:
    layers = [LayerSpec(index=0, role="embedding")]
    for mixer, ffn in zip(mixers, ffns):
        layers.append(LayerSpec(index=len(layers), role="decoder", mixer=mixer, ffn=ffn))
    mtp_ffn = "moe" if "moe" in spec else "dense"
    for _ in range(n_mtp):
        layers.append(LayerSpec(index=len(layers), role="mtp", mixer=mtp_mixer, ffn=mtp_ffn))
    layers.append(LayerSpec(index=len(layers), role="head"))
    if spec.get("intermediate", 0) == 0 and "dense" in ffns:
        raise InputError("config.intermediate_size", "missing for dense layers",
                         "add 'intermediate_size'")
    return ModelSpec(**spec, layers=tuple(layers))
