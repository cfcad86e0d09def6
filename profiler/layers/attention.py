"""Full (softmax) attention mixers: grouped-query attention and multi-head latent attention.

- ``GQAttention``: Qwen3-style GQA with per-head RMSNorm on queries and keys. With
  ``output_gate`` (Qwen3-Next) the query projection also yields a per-channel gate and
  the output is ``o * sigmoid(gate)``; Qwen3-Next rotates only a quarter of each head
  (``partial_rotary_factor`` 0.25).
- ``MLAttention``: DeepSeek-V3 multi-head latent attention (DeepSeek-V2 paper, sec. 2.1):
  queries through a low-rank bottleneck, keys/values from a compressed latent of rank
  ``kv_lora_rank`` plus one shared rotary key of ``qk_rope_head_dim``. Computed in the
  unabsorbed training form (keys/values expanded per head).

Both use ``torch.nn.functional.scaled_dot_product_attention`` with a causal mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from planner.core.model import AttentionSpec, MlaSpec
from profiler.layers.common import RMSNorm, apply_rotary

__all__ = ["GQAttention", "MLAttention"]


class GQAttention(nn.Module):
    """Grouped-query causal self-attention; input and output [B, T, hidden]."""

    def __init__(self, hidden: int, spec: AttentionSpec, *, output_gate: bool = False,
                 rotary_fraction: float = 1.0) -> None:
        super().__init__()
        self.spec = spec
        self.output_gate = output_gate
        q = spec.num_heads * spec.head_dim
        kv = spec.num_kv_heads * spec.head_dim
        self.q_proj = nn.Linear(hidden, q * (2 if output_gate else 1), bias=False)
        self.k_proj = nn.Linear(hidden, kv, bias=False)
        self.v_proj = nn.Linear(hidden, kv, bias=False)
        self.o_proj = nn.Linear(q, hidden, bias=False)
        self.q_norm = RMSNorm(spec.head_dim)
        self.k_norm = RMSNorm(spec.head_dim)
        self.rotary_dim = 2 * max(1, round(spec.head_dim * rotary_fraction / 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        s = self.spec
        q = self.q_proj(x)
        gate = None
        if self.output_gate:
            q, gate = q.view(B, T, s.num_heads, 2 * s.head_dim).chunk(2, dim=-1)
            gate = gate.reshape(B, T, -1)
        q = self.q_norm(q.reshape(B, T, s.num_heads, s.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, s.num_kv_heads, s.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, s.num_kv_heads, s.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, self.rotary_dim), apply_rotary(k, self.rotary_dim)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=s.num_heads != s.num_kv_heads)
        o = o.transpose(1, 2).reshape(B, T, -1)
        if gate is not None:
            o = o * torch.sigmoid(gate)
        return self.o_proj(o)


class MLAttention(nn.Module):
    """DeepSeek multi-head latent attention, causal; input and output [B, T, hidden]."""

    def __init__(self, hidden: int, spec: MlaSpec) -> None:
        super().__init__()
        self.spec = spec
        qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        self.q_a_proj = nn.Linear(hidden, spec.q_lora_rank, bias=False)
        self.q_a_norm = RMSNorm(spec.q_lora_rank)
        self.q_b_proj = nn.Linear(spec.q_lora_rank, spec.num_heads * qk, bias=False)
        self.kv_a_proj = nn.Linear(hidden, spec.kv_lora_rank + spec.qk_rope_head_dim, bias=False)
        self.kv_a_norm = RMSNorm(spec.kv_lora_rank)
        self.kv_b_proj = nn.Linear(spec.kv_lora_rank,
                                   spec.num_heads * (spec.qk_nope_head_dim + spec.v_head_dim), bias=False)
        self.o_proj = nn.Linear(spec.num_heads * spec.v_head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        s = self.spec
        H, nope, rope = s.num_heads, s.qk_nope_head_dim, s.qk_rope_head_dim
        q = self.q_b_proj(self.q_a_norm(self.q_a_proj(x))).view(B, T, H, nope + rope).transpose(1, 2)
        latent, k_rope = self.kv_a_proj(x).split((s.kv_lora_rank, rope), dim=-1)
        kv = self.kv_b_proj(self.kv_a_norm(latent)).view(B, T, H, nope + s.v_head_dim).transpose(1, 2)
        k_nope, v = kv.split((nope, s.v_head_dim), dim=-1)
        k_rope = apply_rotary(k_rope.view(B, 1, T, rope), rope).expand(B, H, T, rope)
        q_nope, q_rope = q.split((nope, rope), dim=-1)
        q = torch.cat((q_nope, apply_rotary(q_rope, rope)), dim=-1)
        k = torch.cat((k_nope, k_rope), dim=-1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, H * s.v_head_dim))
