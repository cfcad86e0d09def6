"""Mixture of experts: top-k router, routed SwiGLU experts, optional (gated) shared expert.

Routing follows the shipped models (``select_experts``); with an expert-parallel group
the token copies go to their experts' ranks and back (``MoE``). The three compute parts
are exposed separately (``route``, ``experts``, ``finish``) so a layer program can put
the dispatch and combine between them.

Dropless by default (every routed copy runs, the split sizes travel with the tokens:
a counts all-to-all and a host sync per layer). With a ``CapacityMode``
(``profiler.layers.moe_capacity``, Megatron's ``--moe-expert-capacity-factor``) copies
over an expert's capacity are dropped; padded to capacity, the exchanges have static
splits and the layer never syncs the host (see [Note: no host sync when padded]).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from planner.core.errors import InputError
from planner.core.model import MoeSpec
from profiler.layers.common import SwiGLU, param_generator
from profiler.layers.moe_capacity import (CapacityMode, batched_experts, expert_capacity, kept_copies,
                                          padded_slots)
from profiler.layers.program import Ctx, group_rank, group_size

__all__ = ["MoE", "select_experts"]


def select_experts(logits: torch.Tensor, top_k: int, *, sigmoid: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k experts per token from router logits [N, E]: (weights summing to 1, expert ids).

    Softmax scores (Qwen3) or sigmoid scores (DeepSeek-V3), top-k, the k weights
    renormalised to sum to 1. DeepSeek's group-limited selection, score-correction bias
    and routed scaling factor are left out: they change which experts win, not the work
    per token."""
    logits = logits.float()
    scores = torch.sigmoid(logits) if sigmoid else torch.softmax(logits, dim=-1)
    top, idx = torch.topk(scores, top_k, dim=-1)
    return top / top.sum(dim=-1, keepdim=True), idx


class MoE(nn.Module):
    """Routed experts (+ shared expert); the parts are called by a layer program.

    With an expert-parallel group of P ranks, rank r holds experts ``[r E/P, (r+1) E/P)``.
    Tokens are copied once per chosen expert, sorted by expert, and sent with a real
    ``all_to_all_single`` (dispatch); each rank runs its experts on what it received and
    sends the results back (combine). Without a group every expert runs locally.
    """

    def __init__(self, hidden: int, spec: MoeSpec, *, sigmoid_scores: bool = False,
                 ep_group: Any = None, capacity: CapacityMode | None = None) -> None:
        super().__init__()
        self.spec, self.hidden, self.group = spec, hidden, ep_group
        self.capacity = capacity
        """Token dropping / padding (None: dropless)."""
        self.ep = group_size(ep_group) if ep_group is not None else 1
        self.ep_rank = group_rank(ep_group) if ep_group is not None else 0
        if spec.num_experts % self.ep:
            raise InputError("--ep", f"{self.ep} does not divide the {spec.num_experts} experts",
                             "pick an expert-parallel size that divides the expert count")
        self.local_experts = spec.num_experts // self.ep
        self.sigmoid_scores = sigmoid_scores
        self.router = nn.Linear(hidden, spec.num_experts, bias=False)
        inter = spec.expert_intermediate
        self.w_gate_up = nn.Parameter(torch.empty(self.local_experts, 2 * inter, hidden))
        self.w_down = nn.Parameter(torch.empty(self.local_experts, hidden, inter))
        self.shared = SwiGLU(hidden, spec.shared_intermediate) if spec.shared_intermediate else None
        self.shared_gate = nn.Linear(hidden, 1, bias=False) if spec.shared_gate and self.shared else None

    def init_experts(self, *, seed: int, layer_index: int) -> None:
        """Draw each expert from its own generator (keyed by its global id), so an expert's
        weights do not depend on the expert-parallel size."""
        first = self.ep_rank * self.local_experts
        with torch.no_grad():
            for param, name in ((self.w_gate_up, "gate_up"), (self.w_down, "down")):
                for e in range(self.local_experts):
                    gen = param_generator(seed, layer_index, f"experts.{first + e}.{name}")
                    shape = param.shape[1:]
                    param[e].copy_(torch.empty(shape).normal_(0.0, shape[-1] ** -0.5, generator=gen))
                param._ppplan_init_done = True

    def route(self, x: torch.Tensor, ctx: Ctx) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k routing of x [N, H]: returns (token copies sorted by expert, their weights).

        Writes ``tokens_per_expert`` (rows each expert gets from this rank's tokens),
        ``token_of`` (source token of each copy) and, with a group, the ``dispatch`` and
        ``combine`` splits when padded (else ``moe_steps``' counts step derives them)."""
        top, idx = select_experts(self.router(x), self.spec.top_k, sigmoid=self.sigmoid_scores)
        cap = self.capacity
        if cap is not None and cap.pad:
            return self._route_padded(x, top, idx, ctx)
        expert_of = idx.flatten()
        if cap is not None:  # drop the copies over capacity: they sort last, past the kept ones
            n = expert_capacity(x.shape[0], self.spec.top_k, self.spec.num_experts, cap.factor)
            keep = kept_copies(top, idx, self.spec.num_experts, n, cap.drop_policy).flatten()
            expert_of = torch.where(keep, expert_of, self.spec.num_experts)
        order = torch.argsort(expert_of, stable=True)
        counts = torch.bincount(expert_of, minlength=self.spec.num_experts)[:self.spec.num_experts]
        if cap is not None:
            order = order[:int(counts.sum())]
        token_of = order // self.spec.top_k
        ctx["tokens_per_expert"] = counts
        ctx["token_of"] = token_of
        return x.index_select(0, token_of), top.flatten()[order].to(x.dtype)

    def _route_padded(self, x: torch.Tensor, top: torch.Tensor, idx: torch.Tensor,
                      ctx: Ctx) -> tuple[torch.Tensor, torch.Tensor]:
        """``route`` with fixed-size expert buffers: ``capacity`` rows per expert, static
        splits, no host sync ([Note: no host sync when padded])."""
        e, cap = self.spec.num_experts, self.capacity
        n = expert_capacity(x.shape[0], self.spec.top_k, e, cap.factor)
        token_of, weights = padded_slots(top, idx, e, n, cap.drop_policy)
        ctx["tokens_per_expert"] = torch.full((e,), n, dtype=torch.long, device=x.device)
        ctx["token_of"] = token_of
        if self.group is not None:
            splits = [self.local_experts * n] * self.ep
            ctx["dispatch"] = ctx["combine"] = (splits, splits)
        return x.index_select(0, token_of), weights.to(x.dtype)

    def experts(self, rows: torch.Tensor, ctx: Ctx) -> torch.Tensor:
        """Run the local experts on received rows (grouped by source rank, then expert)."""
        if self.capacity is not None and self.capacity.pad:
            return self._experts_padded(rows)
        if self.group is None:
            return self._run(rows, ctx["tokens_per_expert"].tolist())
        # [Note: one GEMM per source rank] Each source rank's rows go through each expert
        # in a GEMM of their own: the rows one rank's microbatch routed to the expert, the
        # very GEMM that rank runs with every expert local (the replay's single-process
        # reference). In one GEMM over every rank's rows a row gets other low bits (the
        # BLAS picks kernel and blocking by the row count: on a CPU, F.linear of n rows
        # can differ from the first n of n + m rows), and a deep model amplifies them
        # until the EP replay's gradient check fails. Same FLOPs, P times the GEMMs.
        recv = ctx["recv_counts"].tolist()                            # [P][local experts]
        chunks = rows.split([sum(c) for c in recv])
        return torch.cat([self._run(chunk, counts) for chunk, counts in zip(chunks, recv)])

    def _experts_padded(self, rows: torch.Tensor) -> torch.Tensor:
        """Padded rows [P x local experts x capacity, H] through one batched GEMM."""
        p, local, hidden = self.ep, self.local_experts, rows.shape[-1]
        cap = rows.shape[0] // (p * local)
        grouped = rows.view(p, local, cap, hidden).transpose(0, 1).reshape(local, p * cap, hidden)
        out = batched_experts(grouped, self.w_gate_up, self.w_down)
        return out.view(local, p, cap, hidden).transpose(0, 1).reshape(rows.shape)

    def _run(self, rows: torch.Tensor, counts: list[int]) -> torch.Tensor:
        outs, start = [], 0
        # unbind once: its backward stacks the per-expert gradients in one op
        gate_up, down = self.w_gate_up.unbind(0), self.w_down.unbind(0)
        for e, n in enumerate(counts):
            if n:
                gate, up = F.linear(rows[start:start + n], gate_up[e]).chunk(2, dim=-1)
                outs.append(F.linear(F.silu(gate) * up, down[e]))
                start += n
        # [Note: no tokens, same collectives] a rank whose experts received no rows returns
        # an empty slice *of the rows*, still in the autograd graph: a detached result
        # would skip the combine's backward all-to-all on this rank only, and its
        # expert-parallel peers would wait for it forever (seen as a hang of pp 2 x ep 2
        # replays: torch's shape inference feeds later stages uninitialised inputs, which
        # often route every token to one rank's experts)
        return torch.cat(outs) if outs else rows[:0]

    def finish(self, back: torch.Tensor, weights: torch.Tensor, x: torch.Tensor,
               ctx: Ctx) -> torch.Tensor:
        """Weighted sum of each token's expert outputs, plus the shared expert of x [N, H]."""
        y = x.new_zeros(x.shape).index_add(0, ctx["token_of"], back * weights[:, None])
        if self.shared is not None:
            shared = self.shared(x)
            if self.shared_gate is not None:
                shared = shared * torch.sigmoid(self.shared_gate(x))
            y = y + shared
        return y

    def forward_local(self, x: torch.Tensor) -> torch.Tensor:
        """The whole MoE on x [N, H] when every expert is local (no group)."""
        ctx: Ctx = {}
        rows, weights = self.route(x, ctx)
        return self.finish(self.experts(rows, ctx), weights, x, ctx)

