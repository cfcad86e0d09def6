"""A transformers MoE block cut into router | dispatch | experts | combine | shared expert.

The block's own modules do the work: its router (``block.gate``, which returns
``(logits, top-k weights, top-k ids)`` in every family transformers 5 ships:
``Qwen3MoeTopKRouter``, ``Qwen3NextTopKRouter``, ``MixtralTopKRouter``,
``DeepseekV3TopkRouter`` ...), its experts' weights (``block.experts.gate_up_proj``
[E, 2I, H] and ``down_proj`` [E, H, I]) with their own gate function
(``experts._apply_gate``, from ``integrations/moe.py``), and its shared expert
(``shared_expert`` + ``shared_expert_gate`` in Qwen2-MoE / Qwen3-Next, ``shared_experts``
in DeepSeek). What this module adds is expert parallelism: token copies sorted by
expert, counted and sent to their expert's rank with ppplan's all-to-alls
(``profiler.layers.program``); each rank keeps ``experts / ep`` of the block's expert
weights, run as one grouped GEMM pair (``grouped_experts``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from planner.core.errors import InputError
from profiler.layers.program import Ctx, group_rank, group_size

__all__ = ["HfExperts", "grouped_experts"]


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward hands on a contiguous gradient: the grouped GEMM's CPU
    backward refuses a strided one (e.g. the gradient of a ``chunk``)."""

    @staticmethod
    def forward(ctx, x):  # noqa: D401 - autograd signature
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


def _grouped_mm(rows: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """rows [S, K] times per-group weight [G, N, K] (``nn.Linear`` layout) -> [S, N].

    The kernel wants 16-byte strides; a width that is not a multiple of 16 bytes (only
    at tiny test scales) is zero-padded, which adds nothing to the product."""
    mm = getattr(torch.nn.functional, "grouped_mm", None) or torch._grouped_mm
    step = 16 // rows.element_size()
    k, n = rows.shape[1], weight.shape[1]
    pad_k, pad_n = -k % step, -n % step
    if pad_k or pad_n:
        rows = F.pad(rows, (0, pad_k))
        weight = F.pad(weight, (0, pad_k, 0, pad_n))
    return _ContiguousGrad.apply(mm(rows, weight.transpose(-2, -1), offs=offsets))[:, :n]


def grouped_experts(experts: nn.Module, rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The experts of ``experts`` (a transformers experts module, possibly sliced to this
    rank's) on ``rows`` [S, H] grouped by expert, ``counts[e]`` rows each.

    One grouped GEMM pair over the received rows: ``torch.nn.functional.grouped_mm``
    (``torch._grouped_mm`` on older torch) with the cumulative row counts as offsets, as
    transformers' ``grouped_mm_experts_forward`` does (``integrations/moe.py``), on the CPU
    as on a GPU; no Python loop over experts."""
    if rows.shape[0] == 0:  # see [Note: no tokens, same collectives] in profiler.layers.moe
        return rows[:0]
    offsets = torch.cumsum(counts.to(rows.device), 0, dtype=torch.int32)
    h = experts._apply_gate(_grouped_mm(rows, experts.gate_up_proj, offsets))
    return _grouped_mm(h.contiguous(), experts.down_proj, offsets)


def _shared(block: nn.Module, x: torch.Tensor) -> torch.Tensor | None:
    """The block's shared expert on x (gated where the family gates it), or None."""
    if hasattr(block, "shared_expert"):  # modeling_qwen2_moe.py / modeling_qwen3_next.py
        out = block.shared_expert(x)
        gate = getattr(block, "shared_expert_gate", None)
        return out if gate is None else torch.sigmoid(gate(x)) * out
    if hasattr(block, "shared_experts"):  # modeling_deepseek_v3.py
        return block.shared_experts(x)
    return None


class HfExperts:
    """Routing, expert-parallel bookkeeping and experts of one transformers MoE block."""

    def __init__(self, block: nn.Module, *, ep_group: Any = None) -> None:
        self.block, self.group = block, ep_group
        self.num_experts = block.experts.gate_up_proj.shape[0]
        self.ep = group_size(ep_group) if ep_group is not None else 1
        if self.num_experts % self.ep:
            raise InputError("--ep", f"{self.ep} does not divide the {self.num_experts} experts",
                             "pick an expert-parallel size that divides the expert count")
        self.local = self.num_experts // self.ep
        self.top_k = block.gate.top_k

    def keep_local(self) -> None:
        """Drop the other ranks' experts (call after the weights are drawn)."""
        if self.ep == 1:
            return
        first = group_rank(self.group) * self.local
        experts = self.block.experts
        for name in ("gate_up_proj", "down_proj"):
            full = getattr(experts, name)
            setattr(experts, name, nn.Parameter(full.detach()[first:first + self.local].clone()))
        experts.num_experts = self.local

    def route(self, x: torch.Tensor, ctx: Ctx) -> tuple[torch.Tensor, torch.Tensor]:
        """Router on x [N, H]; returns (token copies sorted by expert, their weights) and
        writes ``tokens_per_expert`` and ``token_of`` (``moe_steps``' counts step sends the counts)."""
        _, weights, idx = self.block.gate(x)
        expert_of = idx.flatten()
        order = torch.argsort(expert_of, stable=True)
        counts = torch.bincount(expert_of, minlength=self.num_experts)
        token_of = order // self.top_k
        ctx["tokens_per_expert"] = counts
        ctx["token_of"] = token_of
        return x.index_select(0, token_of), weights.flatten()[order].to(x.dtype)

    def experts(self, rows: torch.Tensor, ctx: Ctx) -> torch.Tensor:
        """This rank's experts on the rows it received (grouped by source rank, then expert)."""
        experts = self.block.experts
        if self.group is None:
            return grouped_experts(experts, rows, ctx["tokens_per_expert"])
        # One grouped GEMM per source rank: each expert then multiplies exactly the rows one
        # rank's microbatch routed to it, as that rank does with every expert local (the
        # replay's reference); one GEMM over every rank's rows changes their low bits
        # ([Note: one GEMM per source rank] in profiler/layers/moe.py): with it, a pp 2 x ep 2
        # replay of Qwen3-Next at 1/32 width failed its gradient check.
        recv = ctx["recv_counts"]                                        # [P, local experts]
        chunks = rows.split(recv.sum(1).tolist())
        return torch.cat([grouped_experts(experts, chunk, counts) if chunk.shape[0] else chunk
                          for chunk, counts in zip(chunks, recv)])

    def finish(self, back: torch.Tensor, weights: torch.Tensor, x: torch.Tensor, ctx: Ctx) -> torch.Tensor:
        """Weighted sum of each token's expert outputs plus the shared expert of x [N, H]."""
        y = x.new_zeros(x.shape).index_add(0, ctx["token_of"], back * weights[:, None])
        shared = _shared(self.block, x)
        return y if shared is None else y + shared
