"""Building blocks shared by the layer modules: norms, SwiGLU, rotary embedding, init.

Initialisation is deterministic and independent of the device: every parameter is
drawn on the CPU from a generator seeded by (seed, layer index, parameter name), so
the same layer built twice, or built with its experts split over an expert-parallel
group, holds the same numbers.
"""

from __future__ import annotations

import zlib

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["RMSNorm", "SwiGLU", "apply_rotary", "init_parameters", "param_generator"]

_NORM_EPS = 1e-6


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale (Zhang & Sennrich 2019)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, _NORM_EPS)


class SwiGLU(nn.Module):
    """Gated MLP ``down(silu(gate(x)) * up(x))`` (Shazeer 2020), gate and up fused."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


def apply_rotary(x: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """Rotate the first ``rotary_dim`` channels of ``x`` [B, heads, T, D] by position
    (RoPE, Su et al. 2021, base 10000; half-split layout as in Llama/Qwen)."""
    if rotary_dim == 0:
        return x
    T = x.shape[-2]
    half = rotary_dim // 2
    inv = 1.0 / (10000.0 ** (torch.arange(half, device=x.device, dtype=torch.float32) / half))
    angles = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    a, b = rot[..., :half], rot[..., half:]
    rotated = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return torch.cat((rotated, rest), dim=-1)


def param_generator(seed: int, layer_index: int, name: str) -> torch.Generator:
    """CPU generator for one parameter, seeded by (seed, layer, name)."""
    key = zlib.crc32(f"{seed}/{layer_index}/{name}".encode())
    return torch.Generator().manual_seed(key)


def init_parameters(module: nn.Module, *, seed: int, layer_index: int) -> None:
    """Fill every parameter deterministically: norms 1, decay logs log(U[1, 16]),
    matrices N(0, 1/fan_in) with fan_in the last dimension (``nn.Linear`` layout).
    Parameters marked ``_ppplan_init_done`` (expert shards) are left alone."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if getattr(p, "_ppplan_init_done", False):
                continue
            gen = param_generator(seed, layer_index, name)
            leaf = name.rsplit(".", 1)[-1]
            if p.dim() == 1 and leaf == "A_log":
                p.copy_(torch.empty(p.shape).uniform_(1, 16, generator=gen).log())
            elif p.dim() == 1:
                p.copy_(torch.ones(p.shape) if leaf == "weight" else torch.zeros(p.shape))
            else:
                std = p.shape[-1] ** -0.5 if "embed" not in name else 1.0
                p.copy_(torch.empty(p.shape).normal_(0.0, std, generator=gen))
