"""Gated linear attention standing in for Qwen3-Next's Gated DeltaNet.

Same projections, parameters and recurrent state size as Gated DeltaNet (Yang et al.
2024, "Gated Delta Networks"; Qwen3-Next modeling code): a fused q/k/v/z projection,
a beta/alpha projection per value head, a short causal depthwise convolution with
SiLU over q, k, v, per-head decay ``g = -exp(A_log) * softplus(alpha + dt_bias)``,
a gated RMSNorm ``norm(o) * silu(z)`` and an output projection. The state is a
``key_head_dim x value_head_dim`` matrix per value head.

Simplified: the state update is the gated linear-attention rule
``S_t = exp(g_t) S_{t-1} + beta_t k_t v_t^T`` instead of the delta rule
``S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t k_t v_t^T``; the delta rule's
extra in-chunk triangular solve (the WY / UT transform) is left out. It is computed in
the chunked form (GLA, Yang et al. 2023): quadratic attention with a decay mask inside
chunks of ``CHUNK`` tokens, the state carried across chunks, so the work per token is
the same order as the real kernel's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from planner.core.model import LinearAttentionSpec
from profiler.layers.common import RMSNorm

__all__ = ["GatedLinearAttention", "CHUNK", "chunked_gated_linear_attention"]

CHUNK = 64
"""Tokens per chunk of the chunked form (the fla kernels' default)."""


class GatedLinearAttention(nn.Module):
    """Gated linear attention mixer; input and output [B, T, hidden]."""

    def __init__(self, hidden: int, spec: LinearAttentionSpec) -> None:
        super().__init__()
        self.spec = spec
        qk = spec.num_key_heads * spec.key_head_dim
        v = spec.num_value_heads * spec.value_head_dim
        self.in_proj_qkvz = nn.Linear(hidden, 2 * qk + 2 * v, bias=False)
        self.in_proj_ba = nn.Linear(hidden, 2 * spec.num_value_heads, bias=False)
        self.conv = nn.Conv1d(2 * qk + v, 2 * qk + v, spec.conv_kernel, groups=2 * qk + v,
                              padding=spec.conv_kernel - 1, bias=False)
        self.A_log = nn.Parameter(torch.zeros(spec.num_value_heads))
        self.dt_bias = nn.Parameter(torch.zeros(spec.num_value_heads))
        self.norm = RMSNorm(spec.value_head_dim)
        self.out_proj = nn.Linear(v, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        s = self.spec
        qk = s.num_key_heads * s.key_head_dim
        v_dim = s.num_value_heads * s.value_head_dim
        qkv, z = self.in_proj_qkvz(x).split((2 * qk + v_dim, v_dim), dim=-1)
        qkv = F.silu(self.conv(qkv.transpose(1, 2))[..., :T]).transpose(1, 2)
        q, k, v = qkv.split((qk, qk, v_dim), dim=-1)
        b, a = self.in_proj_ba(x).chunk(2, dim=-1)
        beta = torch.sigmoid(b).transpose(1, 2)                                    # [B, Hv, T]
        g = (-self.A_log.exp() * F.softplus(a + self.dt_bias)).transpose(1, 2)     # [B, Hv, T]
        group = s.num_value_heads // s.num_key_heads
        q = F.normalize(q.view(B, T, s.num_key_heads, -1), dim=-1).repeat_interleave(group, dim=2)
        k = F.normalize(k.view(B, T, s.num_key_heads, -1), dim=-1).repeat_interleave(group, dim=2)
        v = v.view(B, T, s.num_value_heads, -1)
        o = chunked_gated_linear_attention(q.transpose(1, 2) * s.key_head_dim ** -0.5,
                                           k.transpose(1, 2) * beta[..., None],
                                           v.transpose(1, 2), g)
        o = self.norm(o.transpose(1, 2)) * F.silu(z.view(B, T, s.num_value_heads, -1))
        return self.out_proj(o.reshape(B, T, v_dim))


def chunked_gated_linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                   g: torch.Tensor) -> torch.Tensor:
    """``o_t = q_t S_t`` with ``S_t = exp(g_t) S_{t-1} + k_t v_t^T`` (S_0 = 0), chunked.

    q, k: [B, H, T, dk]; v: [B, H, T, dv]; g: [B, H, T] log-decay (<= 0). Returns [B, H, T, dv].
    """
    B, H, T, dk = q.shape
    pad = (-T) % CHUNK
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g = F.pad(g, (0, pad))
    n = (T + pad) // CHUNK
    q, k, v = (t.reshape(B, H, n, CHUNK, -1) for t in (q, k, v))
    G = g.reshape(B, H, n, CHUNK).float().cumsum(-1)                # decay from chunk start
    causal = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril()
    diff = (G[..., :, None] - G[..., None, :]).masked_fill(~causal, float("-inf"))
    scores = (q @ k.transpose(-1, -2)) * diff.exp().to(q.dtype)
    intra = scores @ v                                               # [B, H, n, C, dv]
    q_decay = q * G.exp().to(q.dtype)[..., None]
    k_decay = k * (G[..., -1:] - G).exp().to(k.dtype)[..., None]
    chunk_decay = G[..., -1].exp().to(q.dtype)                       # [B, H, n]
    state = q.new_zeros(B, H, dk, v.shape[-1])
    outs = []
    for c in range(n):
        outs.append(intra[:, :, c] + q_decay[:, :, c] @ state)
        state = state * chunk_decay[:, :, c, None, None] + k_decay[:, :, c].transpose(-1, -2) @ v[:, :, c]
    return torch.stack(outs, dim=2).reshape(B, H, n * CHUNK, -1)[:, :, :T]
