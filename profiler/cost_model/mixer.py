"""Token-mixer (attention, MLA, Gated DeltaNet) costs of one layer and microbatch.

Projections are GEMMs (FP8 when the recipe is); attention cores run at ``FLASH_EFF`` of
the BF16 peak (FlashAttention-2/3 forward on H100 is reported at 50-75% of peak,
backward lower: Shah et al. 2024, "FlashAttention-3"), the chunked linear-attention
kernel at ``LINEAR_EFF`` (flash-linear-attention's chunked kernels are memory bound at
chunk 64). Backward of a core is 2.5x its forward (FlashAttention backward recomputes
the scores). Context parallelism splits the queries (``ctx.tokens`` is already per CP
rank) while each query still sees the whole causal prefix (``seq_len``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.model import LayerSpec
from profiler.cost_model.context import CostContext

__all__ = ["MixerCost", "mixer_cost", "FLASH_EFF", "LINEAR_EFF", "LINEAR_CHUNK"]

FLASH_EFF = 0.5
LINEAR_EFF = 0.3
LINEAR_CHUNK = 64


@dataclass(frozen=True, kw_only=True)
class MixerCost:
    """One mixer's forward pieces."""

    proj_s: float
    """Projection GEMMs, seconds (forward; input-grad and weight-grad take the same)."""
    core_f_s: float
    """Core forward, seconds (CP ring passing beyond the core's time included)."""
    core_b_s: float
    """Core backward, seconds."""
    saved: float
    """Saved activation elements."""
    w_in: float
    """Saved matmul-input elements (kept until the weight gradient)."""


def mixer_cost(ctx: CostContext, layer: LayerSpec) -> MixerCost:
    """Costs of ``layer``'s token mixer for one microbatch on one GPU."""
    m, T, tp = ctx.model, ctx.tokens, ctx.tp
    h, seq = m.hidden, ctx.cluster.training.seq_len
    peak = ctx.cluster.gpu.peak_flops
    if layer.mixer == "gqa":
        a = m.attention
        q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
        gated = m.linear is not None
        proj = 2 * T * (h * (q * (2 if gated else 1) + 2 * kv) + q * h) / tp
        core = 2 * T * a.num_heads * 2 * a.head_dim * seq / 2 / tp  # causal: half the scores
        saved = T * (h + q + 2 * kv + q + (q if gated else 0)) / tp
        w_in, kv_elems, n = T * (h + q) / tp, 2 * kv, (q + 2 * kv) / tp
        eff = FLASH_EFF
    elif layer.mixer == "mla":
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        proj = 2 * T * (h * a.q_lora_rank + a.q_lora_rank * a.num_heads * qk
                        + h * (a.kv_lora_rank + a.qk_rope_head_dim)
                        + a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
                        + a.num_heads * a.v_head_dim * h) / tp
        core = 2 * T * a.num_heads * (qk + a.v_head_dim) * seq / 2 / tp
        saved = T * (h + a.q_lora_rank + a.kv_lora_rank + a.num_heads * (2 * qk + 2 * a.v_head_dim) / tp)
        w_in = T * (h + a.q_lora_rank + a.kv_lora_rank + a.num_heads * a.v_head_dim / tp)
        kv_elems, n, eff = a.num_heads * (qk + a.v_head_dim), a.q_lora_rank, FLASH_EFF
    else:
        lin = m.linear
        qk, v = lin.num_key_heads * lin.key_head_dim, lin.num_value_heads * lin.value_head_dim
        proj = 2 * T * (h * (2 * qk + 2 * v + 2 * lin.num_value_heads) + v * h) / tp
        core = 2 * T * lin.num_value_heads * (2 * lin.key_head_dim * lin.value_head_dim
                                             + LINEAR_CHUNK * (lin.key_head_dim + lin.value_head_dim)) / tp
        states = T / LINEAR_CHUNK * lin.num_value_heads * lin.key_head_dim * lin.value_head_dim * 2
        saved = (T * (h + 2 * (2 * qk + v) + 3 * v) + states) / tp
        w_in, kv_elems, n, eff = T * (h + v) / tp, 0.0, (2 * qk + 2 * v) / tp, LINEAR_EFF
    core_f = core / (peak * eff)
    ring = ctx.cp_comm(kv_elems)
    return MixerCost(proj_s=ctx.gemm(proj, T, n, h), core_f_s=max(core_f, ring),
                     core_b_s=max(2.5 * core_f, 2 * ring), saved=saved, w_in=w_in)
