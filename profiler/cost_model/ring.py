"""Context-parallel attention core, per ring step, by the implementation the run used.

``training.cp_comm_type`` names it in the framework's own words:

- ``p2p`` (and ``auto``, the default): Megatron / Transformer Engine's ring
  (``--cp-comm-type p2p``): the core at the full-sequence rate, the K/V passing hidden
  behind it and only its excess exposed (``CostContext.cp_comm``; the model before
  per-step costing, kept so that plans without the field do not move);
- ``torch_allgather`` / ``torch_alltoall``: PyTorch's ring attention
  (``torch.distributed.tensor.experimental.context_parallel``, torchtitan's CP), its
  rotate method ``set_rotate_method("allgather" | "alltoall")`` (torchtitan
  ``experimental.context_parallel_rotate_method``). Each ring step is its own SDPA call
  on a 1/cp chunk (``_templated_ring_attention`` in
  torch/distributed/tensor/experimental/_context_parallel/_attention.py): step 0 the causal
  local chunk (L x L), steps 1..cp-1 with round-robin load balancing either the full local
  queries against half the keys or half the queries against all (L x L/2 each); the
  partial outputs are merged in FP32 with LSE rescaling (``_SDPAMerger._merge_one``,
  memory bound: ``MERGE_BYTES``); the backward (``_templated_ring_attention_backward``)
  runs the flash backward per step, accumulates dQ/dK/dV in FP32 (``convert_to_f32``) and
  passes the FP32 dK/dV around the ring with all-to-all every step. A step's send is
  exposed where it is longer than the step's compute. K/V travel with every query head:
  torchtitan's Llama repeats the K/V heads before ``F.scaled_dot_product_attention``
  (torchtitan/models/llama/model.py ``Attention.forward``: ``repeat_kv``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.cluster import TORCH_RING
from profiler.cost_model.comm import link_bandwidth, ring_seconds
from profiler.cost_model.context import CostContext
from profiler.cost_model.gemm import gemm_efficiency

__all__ = ["MERGE_BYTES", "CAT_BYTES", "CAST_OUT_BYTES", "BWD_ACCUM_BYTES", "FLASH_REF_SEQ", "CoreTimes",
           "cp_core_times"]

MERGE_BYTES = 38.0
"""HBM bytes per output element of one merge step (``_SDPAMerger``, eager element-wise ops
on FP32): the block output cast to FP32 (read 2, write 4), ``out - block_out`` (read 8,
write 4), the sigmoid-scaled product (read 4, write 4), the subtraction (read 8, write 4)."""
BWD_ACCUM_BYTES = 10.0
"""HBM bytes per element of each backward step's FP32 accumulation of a BF16 gradient
(``grad += grad_``: read 4 + 2, write 4; ``_templated_ring_attention_backward``)."""
CAT_BYTES = 2.0
"""HBM traffic of ``torch.cat`` of the tensors a step sends, per byte sent (read once, written
once: BF16 K/V in both passes, FP32 dK/dV in the backward)."""
CAST_OUT_BYTES = 6.0
"""HBM bytes per output element of ``_SDPAMerger.results``' FP32 -> BF16 cast (read 4, write 2)."""
FLASH_REF_SEQ = 8192
"""Sequence length of the measured attention rates ``mixer.FLASH_EFF`` (FlashAttention-3
paper, figures 5 and 7, sequence 4k-8k; the rates are flat from there to 16k). A chunk at
least this long runs at the measured rate; a shorter one loses by the GEMM shape curve."""


@dataclass(frozen=True)
class CoreTimes:
    """The attention core of one layer and microbatch on one GPU."""

    fwd_s: float
    bwd_s: float


def _rate_scale(ctx: CostContext, m: float, n: float, head_dim: float) -> float:
    """Slowdown of an SDPA call on (m queries x n keys) against the measured rate (>= 1)."""
    ref = gemm_efficiency(FLASH_REF_SEQ, FLASH_REF_SEQ, head_dim, ctx.cal)
    return max(1.0, ref / gemm_efficiency(m, n, head_dim, ctx.cal))


def cp_core_times(ctx: CostContext, *, core_f: float, core_b: float, kv_elems: float,
                  q_elems: float, heads: int, head_dim: float) -> CoreTimes:
    """Forward and backward seconds of the attention core under context parallelism.

    ``core_f``/``core_b``: the whole core's seconds at the measured rate; ``kv_elems``: K and
    V elements per token as the mixer keeps them (Megatron's ring passes those); ``q_elems``:
    query (= output) elements per token on this GPU; ``heads``/``head_dim``: the query heads
    on this GPU (the torch ring passes K/V at that width: module doc)."""
    par, kind = ctx.cluster.parallel, ctx.cluster.training.cp_comm_type
    if par.cp == 1 or kind not in TORCH_RING:
        ring = ctx.cp_comm(kv_elems)
        return CoreTimes(max(core_f, ring), max(core_b, 2 * ring))
    cp, L = par.cp, ctx.tokens
    bw = link_bandwidth(ctx.cluster, par.tp * par.cp)
    kv_bytes = L * 2 * heads * head_dim * ctx.bpe  # one rank's K and V, every head
    # the causal L x L step and each L x L/2 step hold the same work: core / cp each
    f0 = core_f / cp * _rate_scale(ctx, L, L, head_dim)
    fi = core_f / cp * _rate_scale(ctx, L, L / 2, head_dim)
    b0 = core_b / cp * _rate_scale(ctx, L, L, head_dim)
    bi = core_b / cp * _rate_scale(ctx, L, L / 2, head_dim)
    out = L * q_elems
    merge = ctx.mem(0.75 * out * MERGE_BYTES)  # (cp-1)/2 steps on all queries, (cp-1)/2 on half
    cat_f = ctx.mem(kv_bytes * CAT_BYTES)
    if kind == "torch_allgather":
        gather = ring_seconds(cp * kv_bytes, cp, bw)  # once per call, waited for at step 1
        fwd_exposed = max(0.0, gather - f0)
        bwd_kv_exposed = max(0.0, gather - b0)
    else:  # each step's send is issued before its SDPA call and waited for at the next step
        send_f = kv_bytes / bw
        fwd_exposed = max(0.0, send_f - f0) + (cp - 2) * max(0.0, send_f - fi)
        bwd_kv_exposed = max(0.0, send_f - b0) + (cp - 2) * max(0.0, send_f - bi)
    fwd = f0 + (cp - 1) * (fi + merge + cat_f) + fwd_exposed + ctx.mem(out * CAST_OUT_BYTES)
    # backward: FP32 dK/dV sent (all-to-all) after each step, waited for after the next step's
    # SDPA call; the last one after the loop, exposed
    dkv_send = 2 * kv_bytes / bw
    accum = ctx.mem(BWD_ACCUM_BYTES * (0.75 * out + kv_bytes / ctx.bpe) + 3 * kv_bytes * CAT_BYTES)
    bwd = (b0 + (cp - 1) * (bi + accum + max(0.0, dkv_send - bi)) + bwd_kv_exposed + dkv_send)
    return CoreTimes(fwd, bwd)
