"""Megatron's recompute modules, one by one: the activation elements each stops saving and the
forward time it adds to the backward.

Source: Megatron-Core ``TransformerConfig.recompute_modules`` (megatron/core/transformer/
transformer_config.py) and where it is applied (transformer_layer.py ``_forward_attention`` /
``_forward_mlp``: ``tensor_parallel.checkpoint`` around core attention, the dense MLP, the MoE
layer and its shared experts; ``CheckpointWithoutOutput`` around the norms, the MoE activation and
the MLA up-projections, whose outputs, the next matmul's saved inputs, are freed after the forward
and recomputed in the backward). The terms are the per-layer activation terms of Korthikanti et al.
2022 ("Reducing Activation Recomputation in Large Transformer Models", arXiv:2205.05198, section 4:
layer norms 4sbh bytes, the MLP's 19sbh, with sequence parallelism everything over t), as
``profiler.analytical`` counts them for each layer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.core.model import LayerSpec
from profiler.cost_model.context import CostContext
from profiler.overlap_dag import LayerTasks

__all__ = ["ModuleTerm", "LayerPieces", "module_terms", "apply_modules", "up_proj_pieces"]


@dataclass(frozen=True, kw_only=True)
class ModuleTerm:
    """What recomputing one module changes for one layer and microbatch."""

    saved: float = 0.0
    """Activation elements no longer saved from forward to backward."""
    w_in: float = 0.0
    """Of those, the matmul inputs (they were kept until the weight gradient)."""
    attn_b: float = 0.0
    """Forward seconds re-run before the input-gradient of the part before the experts."""
    mlp_b: float = 0.0
    """Forward seconds re-run before the experts' (or dense MLP's) input-gradient."""
    shared_b: float = 0.0
    """Forward seconds re-run before the shared experts' input-gradient."""
    a2a_b: float = 0.0
    """Dispatch plus combine all-to-all seconds re-run in the backward."""


@dataclass(frozen=True, kw_only=True)
class LayerPieces:
    """The pieces of one decoder layer's forward that ``profiler.analytical`` costs."""

    bpe: float
    """Bytes per activation element."""
    local_h: float
    """Elements of one hidden vector per local token (sequence parallel): a norm's output."""
    norm_s: float
    """Seconds of one norm's forward (read and write ``local_h``)."""
    core_f_s: float
    """Attention core forward seconds (0 for a linear-attention mixer)."""
    up_proj_s: float = 0.0
    """MLA up-projections and rotary forward seconds."""
    up_proj_saved: float = 0.0
    """MLA query, key and value elements (the up-projections' outputs)."""
    mlp_f_s: float = 0.0
    """Dense MLP forward seconds."""
    mlp_saved: float = 0.0
    """Dense MLP elements inside the module (gate, up and activation outputs)."""
    mlp_w_in: float = 0.0
    """Of those, the down-projection's input."""
    act_s: float = 0.0
    """Routed experts' activation function seconds (read gate and up, write the product)."""
    act_saved: float = 0.0
    """Routed experts' activation outputs (the down-projection's input)."""
    moe_f_s: float = 0.0
    """MoE layer compute seconds: router, permutation, experts."""
    moe_saved: float = 0.0
    """MoE layer elements beyond its input: router probabilities, permuted tokens, expert
    intermediates."""
    moe_w_in: float = 0.0
    """Of those, matmul inputs (permuted tokens, activation outputs)."""
    a2a_s: float = 0.0
    """Forward dispatch plus combine seconds."""
    shared_f_s: float = 0.0
    """Shared-expert forward seconds."""
    shared_saved: float = 0.0
    """Shared-expert elements (gate, up and activation outputs)."""
    shared_w_in: float = 0.0
    """Of those, the down-projection's input."""


def module_terms(names: tuple[str, ...], p: LayerPieces) -> dict[str, ModuleTerm]:
    """Each module's term for a layer of pieces ``p``; ``moe`` holds its shared experts and its
    activation, so with ``moe`` in ``names`` those two add nothing more."""
    terms = {
        # flash / cuDNN fused attention keeps no s x s tensors (Korthikanti's 5as^2b is gone); its
        # inputs stay saved by the checkpoint and its output by the projection, so only time is added
        "core_attn": ModuleTerm(attn_b=p.core_f_s),
        # the two norms' outputs (QKV input, MLP or router input): Korthikanti's 4sbh
        "layernorm": ModuleTerm(saved=2 * p.local_h, w_in=2 * p.local_h, attn_b=2 * p.norm_s),
        "mla_up_proj": ModuleTerm(saved=p.up_proj_saved, attn_b=p.up_proj_s),
        "mlp": ModuleTerm(saved=p.mlp_saved, w_in=p.mlp_w_in, mlp_b=p.mlp_f_s),
        "moe_act": ModuleTerm(saved=p.act_saved, w_in=p.act_saved, mlp_b=p.act_s),
        "shared_experts": ModuleTerm(saved=p.shared_saved, w_in=p.shared_w_in, shared_b=p.shared_f_s),
        # the whole MoE layer from its input: its dispatch and combine run again too
        "moe": ModuleTerm(saved=p.moe_saved + p.shared_saved, w_in=p.moe_w_in + p.shared_w_in,
                          mlp_b=p.moe_f_s, shared_b=p.shared_f_s, a2a_b=p.a2a_s),
    }
    covered = {"moe_act", "shared_experts"} if "moe" in names else set()
    return {n: terms[n] for n in names if n not in covered}


def up_proj_pieces(ctx: CostContext, layer: LayerSpec) -> dict[str, float]:
    """MLA's up-projections (query from its latent, key and value from theirs) and rotary:
    forward seconds and the query, key and value elements they output (``mla_up_proj``)."""
    a = ctx.model.mla
    if layer.mixer != "mla" or a is None:
        return {}
    T, tp, qk = ctx.tokens, ctx.tp, a.qk_nope_head_dim + a.qk_rope_head_dim
    flops = 2 * T * (a.q_lora_rank * a.num_heads * qk + a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim)) / tp
    elems = T * a.num_heads * (2 * qk + a.v_head_dim) / tp
    return {"up_proj_s": ctx.gemm(flops, T, a.num_heads * qk / tp, a.q_lora_rank) + ctx.mem(2 * elems * ctx.bpe),
            "up_proj_saved": elems}


def apply_modules(names: tuple[str, ...], pieces: LayerPieces, tasks: LayerTasks, saved: float,
                       w_in: float) -> tuple[LayerTasks, float, float, float]:
    """Tasks, saved and W-kept elements and transient bytes under Megatron's module set ``names``
    (``cost_model.recompute_modules``): each module's forward re-runs in the backward and what
    it dropped comes back for that module's backward only (the largest one is the transient)."""
    terms = module_terms(names, pieces).values()
    a2a = sum(t.a2a_b for t in terms) / 2  # the A2A pair re-run: dispatch with dispatch_b, combine with combine_b
    tasks = replace(tasks, attn_b=tasks.attn_b + sum(t.attn_b for t in terms),
                    mlp_b=tasks.mlp_b + sum(t.mlp_b for t in terms),
                    shared_b=tasks.shared_b + sum(t.shared_b for t in terms),
                    dispatch_b=tasks.dispatch_b + a2a, combine_b=tasks.combine_b + a2a)
    work = max((t.saved for t in terms), default=0.0) * pieces.bpe
    return tasks, saved - sum(t.saved for t in terms), w_in - sum(t.w_in for t in terms), work
