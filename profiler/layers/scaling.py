"""Reduced-width copies of a model spec, for measuring on small devices.

``scaled_model(model, s)`` is the one owner of a model's widths at a scale: the native
layers, the transformers configs (``profiler.hf.config``), the routing sampler and the
replay all read the spec it returns. It multiplies every width by ``s`` and keeps the
model whole, so that transformers' own config classes and layers accept it.

[Note: smallest scale] A scale is too small when a width, multiplied by it, falls under
its minimum before any rounding: a head size under 2, the hidden size under its query
heads, any other width under 1. Rounding such a width up would measure a model that is
not the one asked for, so ``scaled_model`` raises ``InputError`` naming ``--scale`` and
``minimum_scale``, the smallest scale that keeps every width.
"""

from __future__ import annotations

import math
from dataclasses import replace

from planner.core.errors import InputError
from planner.core.model import AttentionSpec, LinearAttentionSpec, MlaSpec, ModelSpec, MoeSpec

__all__ = ["scaled_model", "minimum_scale"]

_Short = tuple[str, int, float, int]
"""A width under its minimum: (config field, full width, width at the scale, minimum)."""


class _Widths:
    """Rounds widths at a scale and records those under their minimum ([Note: smallest scale])."""

    def __init__(self) -> None:
        self.short: list[_Short] = []

    def __call__(self, name: str, value: int, factor: float, *, step: int = 1) -> int:
        """``value x factor`` rounded to a multiple of ``step``, at least ``step``; 0 stays 0."""
        if not value:
            return 0
        x = value * factor
        if x < step:
            self.short.append((name, value, x, step))
        return max(step, step * round(x / step))


def _count(value: int, factor: float, *, minimum: int = 1) -> int:
    return max(minimum, round(value * factor))


def _heads(num: int, num_kv: int, root: float) -> tuple[int, int]:
    """(query heads, kv heads) scaled by ``root``, keeping the query-per-kv group size."""
    group = max(1, num // max(num_kv, 1))
    kv = _count(num_kv, root)
    return kv * group, kv


def _attention(a: AttentionSpec, s: float, root: float, w: _Widths) -> AttentionSpec:
    heads, kv = _heads(a.num_heads, a.num_kv_heads, root)
    per_head = s * a.num_heads / heads  # heads x head_dim scales like hidden
    return AttentionSpec(num_heads=heads, num_kv_heads=kv, head_dim=w("head_dim", a.head_dim, per_head, step=2))


def _mla(m: MlaSpec, s: float, root: float, w: _Widths) -> MlaSpec:
    heads = _count(m.num_heads, root)
    per_head = s * m.num_heads / heads
    return MlaSpec(num_heads=heads, q_lora_rank=w("q_lora_rank", m.q_lora_rank, s),
                   kv_lora_rank=w("kv_lora_rank", m.kv_lora_rank, s),
                   qk_nope_head_dim=w("qk_nope_head_dim", m.qk_nope_head_dim, per_head, step=2),
                   qk_rope_head_dim=w("qk_rope_head_dim", m.qk_rope_head_dim, per_head, step=2),
                   v_head_dim=w("v_head_dim", m.v_head_dim, per_head, step=2))


def _linear(lin: LinearAttentionSpec, s: float, root: float, w: _Widths) -> LinearAttentionSpec:
    value_heads, key_heads = _heads(lin.num_value_heads, lin.num_key_heads, root)
    return LinearAttentionSpec(
        num_key_heads=key_heads,
        key_head_dim=w("linear_key_head_dim", lin.key_head_dim, s * lin.num_key_heads / key_heads, step=2),
        num_value_heads=value_heads,
        value_head_dim=w("linear_value_head_dim", lin.value_head_dim, s * lin.num_value_heads / value_heads, step=2),
        conv_kernel=lin.conv_kernel)


def _groups(experts: int, groups: int) -> int:
    """Expert groups that divide ``experts`` with at least two each (0: no groups, 1: one)."""
    while groups > 1 and (experts % groups or experts // groups < 2):
        groups //= 2
    return groups


def _moe(moe: MoeSpec, s: float, w: _Widths, *, least: int) -> MoeSpec:
    experts = _count(moe.num_experts, s, minimum=least)
    expert = w("moe_intermediate_size", moe.expert_intermediate, s)
    if moe.shared_intermediate and moe.shared_intermediate % moe.expert_intermediate == 0:
        shared = moe.shared_intermediate // moe.expert_intermediate * expert
    else:
        shared = w("shared_expert_intermediate_size", moe.shared_intermediate, s)
    groups = _groups(experts, moe.expert_groups)
    return replace(moe, num_experts=experts, top_k=min(experts, _count(moe.top_k, s)),
                   expert_intermediate=expert, shared_intermediate=shared, expert_groups=groups,
                   groups_per_token=min(moe.groups_per_token, groups))


def _hidden(model: ModelSpec, s: float, heads: AttentionSpec | MlaSpec | None, w: _Widths) -> int:
    a = model.attention
    if a is not None and a.num_heads * a.head_dim == model.hidden:  # Llama: the heads span the hidden size
        return heads.num_heads * heads.head_dim
    return w("hidden_size", model.hidden, s, step=heads.num_heads if heads is not None else 1)


def _scaled(model: ModelSpec, s: float) -> tuple[ModelSpec, list[_Short]]:
    """``model`` at scale ``s`` and the widths that fall under their minimum there."""
    w, root = _Widths(), math.sqrt(s)
    attention = _attention(model.attention, s, root, w) if model.attention else None
    mla = _mla(model.mla, s, root, w) if model.mla else None
    spec = replace(
        model,
        hidden=_hidden(model, s, attention or mla, w),
        vocab=w("vocab_size", model.vocab, s),
        intermediate=w("intermediate_size", model.intermediate, s),
        attention=attention,
        mla=mla,
        linear=_linear(model.linear, s, root, w) if model.linear else None,
        moe=_moe(model.moe, s, w, least=2 if model.mla else 1) if model.moe else None,
    )
    return spec, w.short


def _two_digits_up(s: float) -> float:
    """``s`` rounded up to two significant digits, as a user types it."""
    unit = 10.0 ** (math.floor(math.log10(s)) - 1)
    return float(f"{math.ceil(round(s / unit, 9)) * unit:.2g}")


def minimum_scale(model: ModelSpec) -> float:
    """The smallest scale (two significant digits) at which every width of ``model`` keeps
    its minimum ([Note: smallest scale]); 1.0 when only the full width does."""
    s = 1e-9
    while s < 1 and (short := _scaled(model, s)[1]):
        s *= max(least / x for _, _, x, least in short) * (1 + 1e-9)
    s = _two_digits_up(min(s, 1.0))
    while s < 1 and _scaled(model, s)[1]:
        s = _two_digits_up(s * 1.01)
    return min(s, 1.0)


def scaled_model(model: ModelSpec, scale: float) -> ModelSpec:
    """``model`` at ``scale`` times its width (1.0 returns it unchanged); ``InputError``
    naming ``--scale`` when the scale is too small to keep it whole ([Note: smallest scale]).

    - head counts scale by sqrt(s), KV heads at least 1, and query heads stay KV heads x
      the query-per-KV group (GQA; Gated DeltaNet's value heads per key head), whole;
    - head sizes take the rest, so ``heads x head_dim`` scales like ``hidden``; they are
      even (rotary embedding rotates pairs); the hidden size is a multiple of the query
      heads (``LlamaConfig`` and ``DeepseekV2Config`` check it), and where the heads span
      the hidden size (Llama) they still do;
    - routed experts and top-k scale by ``s`` (tokens per expert stay about the same), at
      least one each; with MLA (DeepSeek) at least two experts, since DeepSeek-V3's router
      ranks expert groups by the sum of each group's best two scores
      (``modeling_deepseek_v3.py``, ``DeepseekV3MoE.route_tokens_to_experts``); expert groups
      are halved until they divide the experts with two or more each; a shared expert
      ``n`` routed experts wide stays ``n`` wide (DeepSeek's ``n_shared_experts``).
    """
    if not (0 < scale <= 1):
        raise InputError("--scale", f"must be in (0, 1], got {scale}", "e.g. --scale 0.0625")
    if scale == 1:
        return model
    spec, short = _scaled(model, scale)
    if short:
        name, full, x, least = max(short, key=lambda item: item[3] / item[2])
        raise InputError("--scale", f"{scale:g} is too small for {model.name}: its {name} ({full}) would be "
                         f"{x:.3g} wide, under the minimum {least}",
                         f"use --scale {minimum_scale(model):g} or more")
    return spec
