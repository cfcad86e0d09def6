"""Token-mixer (attention, MLA, Gated DeltaNet) costs of one layer and microbatch.

Projections are GEMMs (FP8 when the recipe is). Attention cores run at the measured
share of the BF16 peak of the kernel the framework uses (Shah et al. 2024,
"FlashAttention-3", arXiv:2407.08608, H100 SXM5, head dim 128, sequence 4k-8k):
Transformer Engine's cuDNN fused attention (``attention_kernel: cudnn``, Megatron) about
600 TFLOP/s forward and 500 backward, FlashAttention-2 (``flash2``: PyTorch's
``scaled_dot_product_attention``, with or without torch.compile) about 370 and 315 (the
paper: "FlashAttention-2 achieving only 35% utilization on the H100"); ``auto`` follows
``kernels`` (fused: cudnn, eager: flash2). Backward FLOPs
are 2.5x forward (five matmuls instead of two: FlashAttention backward recomputes the
scores). The chunked linear-attention kernel runs at ``LINEAR_EFF`` (flash-linear-attention's
chunked kernels are memory bound at chunk 64). Context parallelism splits the queries
(``ctx.tokens`` is already per CP rank) while each query still sees the whole causal prefix
(``seq_len``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.model import LayerSpec
from profiler.cost_model.context import CostContext
from profiler.cost_model.ring import cp_core_times

__all__ = ["MixerCost", "mixer_cost", "FLASH_EFF", "LINEAR_EFF", "LINEAR_CHUNK"]

FLASH_EFF = {"cudnn": (0.61, 0.51), "flash2": (0.37, 0.32)}
"""(forward, backward) share of the BF16 peak of the attention core by kernel:
cuDNN 600-609 / 499-518 TFLOP/s and FlashAttention-2 368-370 / 310-318 TFLOP/s at sequence
4k-8k, head dim 128, over the H100 SXM's 989 (FlashAttention-3 paper, figures 5 and 7)."""
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
        eff = FLASH_EFF[ctx.attention_kernel]
        heads, hd, q_out = a.num_heads // tp, a.head_dim, q / tp
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
        kv_elems, n = a.num_heads * (qk + a.v_head_dim), a.q_lora_rank
        eff = FLASH_EFF[ctx.attention_kernel]
        heads, hd, q_out = 0, 0.0, 0.0  # MLA: Megatron's ring only (the torch ring's rows are GQA)
    else:
        lin = m.linear
        qk, v = lin.num_key_heads * lin.key_head_dim, lin.num_value_heads * lin.value_head_dim
        proj = 2 * T * (h * (2 * qk + 2 * v + 2 * lin.num_value_heads) + v * h) / tp
        core = 2 * T * lin.num_value_heads * (2 * lin.key_head_dim * lin.value_head_dim
                                             + LINEAR_CHUNK * (lin.key_head_dim + lin.value_head_dim)) / tp
        states = T / LINEAR_CHUNK * lin.num_value_heads * lin.key_head_dim * lin.value_head_dim * 2
        saved = (T * (h + 2 * (2 * qk + v) + 3 * v) + states) / tp
        w_in, kv_elems, n = T * (h + v) / tp, 0.0, (2 * qk + 2 * v) / tp
        eff = (LINEAR_EFF, LINEAR_EFF)
        heads, hd, q_out = 0, 0.0, 0.0
    core_f, core_b = core / (peak * eff[0]), 2.5 * core / (peak * eff[1])
    cp = cp_core_times(ctx, core_f=core_f, core_b=core_b, kv_elems=kv_elems, q_elems=q_out,
                       heads=heads, head_dim=hd) if heads else None
    if cp is None:
        ring = ctx.cp_comm(kv_elems)
        core_f, core_b = max(core_f, ring), max(core_b, 2 * ring)
    else:
        core_f, core_b = cp.fwd_s, cp.bwd_s
    return MixerCost(proj_s=ctx.gemm(proj, T, n, h), core_f_s=core_f, core_b_s=core_b, saved=saved, w_in=w_in)
