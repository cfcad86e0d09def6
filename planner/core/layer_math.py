"""Parameter counts and model FLOPs per layer.

These are *model* quantities (what MFU counts), not runtime estimates: the analytical
profiler builds its roofline from finer sub-tasks. Conventions:

- FLOPs follow PaLM (Chowdhery et al. 2022, appendix B): 2 FLOPs per multiply-add,
  training = 3x forward (forward, input grad, weight grad), attention scores counted
  in full (not halved for the causal mask): 12 * H * Q * T per token per layer for
  d_qk = d_v = Q, generalised to 6 * H * (d_qk + d_v) * T.
- MoE layers count *activated* parameters: router, shared expert, and top_k of the
  routed experts.
- The embedding lookup costs no FLOPs; the LM head projection does (it is a matmul).
- Linear attention's recurrent state update is counted from its chunked form
  (state read and write per token: 4 * Hv * dk * dv FLOPs), not from parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.model import LayerSpec, ModelSpec

__all__ = ["ParamCount", "layer_params", "layer_forward_flops", "model_flops_per_token"]


@dataclass(frozen=True, kw_only=True)
class ParamCount:
    """Parameters of one layer, split by how they are sharded."""

    dense: int
    """Parameters replicated across expert-parallel ranks (attention, norms, router, shared expert)."""
    expert: int
    """Routed-expert parameters (sharded across the expert-parallel group)."""
    activated: int
    """Parameters one token touches: dense + top_k / num_experts of the experts."""

    @property
    def total(self) -> int:
        """All parameters of the layer."""
        return self.dense + self.expert


def _mixer_params(model: ModelSpec, mixer: str) -> int:
    h = model.hidden
    if mixer == "gqa":
        a = model.attention
        assert a is not None
        q = a.num_heads * a.head_dim
        kv = a.num_kv_heads * a.head_dim
        gate = q if model.linear is not None else 0  # Qwen3-Next gates attention output
        return h * (q + gate) + 2 * h * kv + q * h + 2 * a.head_dim
    if mixer == "mla":
        m = model.mla
        assert m is not None
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        return (h * m.q_lora_rank + m.q_lora_rank * m.num_heads * qk
                + h * (m.kv_lora_rank + m.qk_rope_head_dim)
                + m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim)
                + m.num_heads * m.v_head_dim * h + m.q_lora_rank + m.kv_lora_rank)
    lin = model.linear
    assert lin is not None
    qk = lin.num_key_heads * lin.key_head_dim
    v = lin.num_value_heads * lin.value_head_dim
    proj = h * (2 * qk + 2 * v) + 2 * h * lin.num_value_heads  # q, k, v, z (gate), beta, alpha
    conv = (2 * qk + v) * lin.conv_kernel
    return proj + conv + v * h + 2 * lin.num_value_heads


def _ffn_params(model: ModelSpec, ffn: str) -> tuple[int, int, int]:
    """(dense, expert, activated) parameters of the feed-forward part."""
    h = model.hidden
    if ffn == "dense":
        p = 3 * h * model.intermediate
        return p, 0, p
    moe = model.moe
    assert moe is not None
    router = h * moe.num_experts
    shared = 3 * h * moe.shared_intermediate + (h if moe.shared_gate else 0)
    one_expert = 3 * h * moe.expert_intermediate
    dense = router + shared
    return dense, one_expert * moe.num_experts, dense + one_expert * moe.top_k


def layer_params(layer: LayerSpec, model: ModelSpec) -> ParamCount:
    """Parameter count of one layer (embedding and head include their vocab matrices)."""
    h = model.hidden
    if layer.role == "embedding":
        return ParamCount(dense=model.vocab * h, expert=0, activated=0)
    if layer.role == "head":
        head = 0 if model.tie_embeddings else model.vocab * h
        return ParamCount(dense=head + h, expert=0, activated=head)
    assert layer.mixer is not None and layer.ffn is not None
    mixer = _mixer_params(model, layer.mixer)
    dense, expert, activated = _ffn_params(model, layer.ffn)
    extra = 2 * h
    if layer.role == "mtp":
        extra += 2 * h * h + 2 * h  # projection of [embedding; hidden] and its two norms
    return ParamCount(dense=mixer + dense + extra, expert=expert,
                      activated=mixer + activated + extra)


def _attention_core_flops(model: ModelSpec, mixer: str, seq_len: int) -> float:
    """Forward FLOPs per token of the token-mixing core (not the projections)."""
    if mixer == "gqa":
        a = model.attention
        assert a is not None
        return 2.0 * a.num_heads * (2 * a.head_dim) * seq_len
    if mixer == "mla":
        m = model.mla
        assert m is not None
        return 2.0 * m.num_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) * seq_len
    lin = model.linear
    assert lin is not None
    return 4.0 * lin.num_value_heads * lin.key_head_dim * lin.value_head_dim


def layer_forward_flops(layer: LayerSpec, model: ModelSpec, seq_len: int) -> float:
    """Model forward FLOPs per token of one layer (PaLM convention, see module doc)."""
    params = layer_params(layer, model)
    flops = 2.0 * params.activated
    if layer.mixer is not None:
        flops += _attention_core_flops(model, layer.mixer, seq_len)
    return flops


def model_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward) of the whole model."""
    return 3.0 * sum(layer_forward_flops(layer, model, seq_len) for layer in model.layers)
