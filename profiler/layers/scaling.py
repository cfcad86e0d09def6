"""Reduced-width copies of a model spec, for measuring on small devices.

``scaled_model(model, s)`` multiplies every width by ``s`` and keeps the ratios between
dimensions: hidden, vocabulary, dense and expert intermediates, the number of routed
experts and the top-k (so tokens per expert stay the same), the latent ranks of MLA.
Head counts scale by sqrt(s) (keeping the query : key/value group size) and head
sizes take the rest, so ``heads x head_dim`` scales like ``hidden`` even where a head
count is rounded up to 1. Every dimension stays at least 1,
head sizes at least 2 and even (rotary embedding rotates pairs). The layer sequence
and the layer types are unchanged.
"""

from __future__ import annotations

import math
from dataclasses import replace

from planner.core.errors import InputError
from planner.core.model import AttentionSpec, LinearAttentionSpec, MlaSpec, ModelSpec, MoeSpec

__all__ = ["scaled_model"]


def _dim(value: int, factor: float, *, minimum: int = 1) -> int:
    return max(minimum, round(value * factor)) if value else 0


def _head_dim(value: int, factor: float) -> int:
    return max(2, 2 * round(value * factor / 2))


def _heads(num: int, num_kv: int, root: float) -> tuple[int, int]:
    """(query heads, kv heads) scaled by ``root``, keeping the query-per-kv group size."""
    group = max(1, num // max(num_kv, 1))
    kv = _dim(num_kv, root)
    return kv * group, kv


def _attention(a: AttentionSpec, s: float, root: float) -> AttentionSpec:
    heads, kv = _heads(a.num_heads, a.num_kv_heads, root)
    per_head = s * a.num_heads / heads  # heads x head_dim scales like hidden
    return AttentionSpec(num_heads=heads, num_kv_heads=kv, head_dim=_head_dim(a.head_dim, per_head))


def _mla(m: MlaSpec, s: float, root: float) -> MlaSpec:
    heads = _dim(m.num_heads, root)
    per_head = s * m.num_heads / heads
    return MlaSpec(num_heads=heads, q_lora_rank=_dim(m.q_lora_rank, s),
                   kv_lora_rank=_dim(m.kv_lora_rank, s),
                   qk_nope_head_dim=_head_dim(m.qk_nope_head_dim, per_head),
                   qk_rope_head_dim=_head_dim(m.qk_rope_head_dim, per_head),
                   v_head_dim=_head_dim(m.v_head_dim, per_head))


def _linear(lin: LinearAttentionSpec, s: float, root: float) -> LinearAttentionSpec:
    value_heads, key_heads = _heads(lin.num_value_heads, lin.num_key_heads, root)
    return LinearAttentionSpec(
        num_key_heads=key_heads,
        key_head_dim=_head_dim(lin.key_head_dim, s * lin.num_key_heads / key_heads),
        num_value_heads=value_heads,
        value_head_dim=_head_dim(lin.value_head_dim, s * lin.num_value_heads / value_heads),
        conv_kernel=lin.conv_kernel)


def _moe(moe: MoeSpec, s: float) -> MoeSpec:
    experts = _dim(moe.num_experts, s)
    top_k = min(experts, _dim(moe.top_k, s))
    return replace(moe, num_experts=experts, top_k=top_k,
                   expert_intermediate=_dim(moe.expert_intermediate, s),
                   shared_intermediate=_dim(moe.shared_intermediate, s))


def scaled_model(model: ModelSpec, scale: float) -> ModelSpec:
    """``model`` at ``scale`` times its width (1.0 returns it unchanged)."""
    if not (0 < scale <= 1):
        raise InputError("--scale", f"must be in (0, 1], got {scale}", "e.g. --scale 0.0625")
    if scale == 1:
        return model
    root = math.sqrt(scale)
    return replace(
        model,
        hidden=_dim(model.hidden, scale),
        vocab=_dim(model.vocab, scale),
        intermediate=_dim(model.intermediate, scale),
        attention=_attention(model.attention, scale, root) if model.attention else None,
        mla=_mla(model.mla, scale, root) if model.mla else None,
        linear=_linear(model.linear, scale, root) if model.linear else None,
        moe=_moe(model.moe, scale) if model.moe else None,
    )
