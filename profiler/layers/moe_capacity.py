"""Megatron's capacity mode for the MoE layer: token dropping and fixed-size expert buffers.

Megatron-LM's flags and semantics (``megatron/core/transformer/moe/moe_utils.py``
``get_capacity`` and ``apply_router_token_dropping``; ``token_dispatcher.py``
``MoEAlltoAllTokenDispatcher.preprocess``): ``--moe-expert-capacity-factor``
(``expert_capacity``; the copies over capacity are dropped, their expert output missing
from the token's weighted sum), ``--moe-token-drop-policy`` (``expert_order``) and
``--moe-pad-expert-input-to-capacity`` (``padded_slots``), gathered in ``CapacityMode``.

[Note: no host sync when padded] In the padded mode ``route``, ``experts`` and
``finish`` only use shapes (Python ints) and device ops whose output size is fixed by
their input shapes (``sort``, ``scatter``, ``gather``, ``index_select``, ``index_add``,
``bmm``): no ``.tolist()``/``.item()``, no ``nonzero``/``bincount``/boolean indexing.
``tests/test_moe_capacity.py`` runs the three parts under a guard that fails on any of
those.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from planner.core.errors import InputError

__all__ = ["CapacityMode", "capacity_mode", "describe", "expert_capacity", "expert_order", "padded_slots",
           "kept_copies", "batched_experts", "DROP_POLICIES"]

DROP_POLICIES = ("probs", "position")
"""Megatron's ``--moe-token-drop-policy`` values."""


@dataclass(frozen=True, kw_only=True)
class CapacityMode:
    """Token dropping (and padding) of the routed experts; None anywhere = dropless."""

    factor: float
    """``--moe-expert-capacity-factor``: capacity per expert, in multiples of the mean load."""
    pad: bool = False
    """``--moe-pad-expert-input-to-capacity``: fixed-size buffers, static all-to-all splits."""
    drop_policy: str = "probs"
    """``--moe-token-drop-policy``: ``probs`` (highest weight kept) or ``position`` (earliest)."""



def capacity_mode(factor: float | None, *, pad: bool = False,
                  drop_policy: str = "probs") -> CapacityMode | None:
    """The mode Megatron's three flags ask for (None: dropless); one-line ``InputError``
    naming the flag on a bad value."""
    if drop_policy not in DROP_POLICIES:
        raise InputError("--moe-token-drop-policy", f"unknown {drop_policy!r}",
                         f"use one of {', '.join(DROP_POLICIES)}")
    if factor is None:
        if pad:
            raise InputError("--moe-pad-expert-input-to-capacity", "needs a capacity",
                             "add --moe-expert-capacity-factor C, as Megatron requires")
        return None
    if not (math.isfinite(factor) and factor > 0):
        raise InputError("--moe-expert-capacity-factor", f"must be a positive finite number, got {factor}",
                         "e.g. --moe-expert-capacity-factor 1.25, or leave it out for dropless routing")
    return CapacityMode(factor=float(factor), pad=pad, drop_policy=drop_policy)


def describe(mode: CapacityMode | None) -> dict[str, object]:
    """The MoE dispatch a profile or replay used, for its meta: ``mode`` (dropless, dropped,
    padded) and Megatron's flags."""
    if mode is None:
        return {"mode": "dropless"}
    return {"mode": "padded" if mode.pad else "dropped", "moe_expert_capacity_factor": mode.factor,
            "moe_pad_expert_input_to_capacity": mode.pad, "moe_token_drop_policy": mode.drop_policy}


def expert_capacity(num_tokens: int, top_k: int, num_experts: int, factor: float) -> int:
    """Copies one expert takes from one rank: Megatron ``get_capacity(num_tokens=tokens x
    top_k, num_experts, capacity_factor)`` = ``ceil(tokens x top_k / experts x factor)``
    (``tokens``: that rank's tokens of the microbatch)."""
    return math.ceil(num_tokens * top_k / num_experts * factor)


def expert_order(top: torch.Tensor, idx: torch.Tensor, num_experts: int,
                 policy: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(order [E, N]: each expert's tokens, the ones it keeps first; probs [E, N]: routing
    weight of token n at expert e, 0 where not chosen) from top-k weights and ids [N, k].

    Chosen tokens come before the others; among them ``probs`` sorts by weight
    (descending), ``position`` by token index; a stable sort breaks ties by position
    (Megatron leaves them to ``torch.topk``)."""
    n = top.shape[0]
    probs = top.new_zeros(n, num_experts).scatter(1, idx, top).T
    chosen = torch.zeros(n, num_experts, dtype=torch.bool, device=top.device).scatter(1, idx, True).T
    key = torch.where(chosen, probs.detach(), -1.0) if policy == "probs" else chosen.to(top.dtype)
    return torch.sort(key, dim=1, descending=True, stable=True).indices, probs


def padded_slots(top: torch.Tensor, idx: torch.Tensor, num_experts: int, capacity: int,
                 policy: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(token of each slot, its weight), each ``[E x capacity]`` expert-major: the kept
    copies of each expert, then weight-0 padding. Fixed shapes, no host sync.

    Every expert's buffer is filled up to capacity, the empty slots holding a token with
    routing weight 0 (as Megatron's padded routing map does), so every rank sends
    ``capacity`` rows per expert to every rank: the all-to-all splits are known from the
    shapes alone, with no token-count exchange and nothing that reads a device value on the
    host.
    """
    order, probs = expert_order(top, idx, num_experts, policy)
    n = order.shape[1]
    slots = order[:, :capacity]
    weights = probs.gather(1, slots)  # 0 for a slot holding a token the expert did not win
    if capacity > n:  # more room than tokens: pad with token 0 at weight 0
        slots = torch.cat((slots, slots.new_zeros(num_experts, capacity - n)), dim=1)
        weights = torch.cat((weights, weights.new_zeros(num_experts, capacity - n)), dim=1)
    return slots.flatten(), weights.flatten()


def kept_copies(top: torch.Tensor, idx: torch.Tensor, num_experts: int, capacity: int,
                policy: str) -> torch.Tensor:
    """Boolean [N, k]: which of the top-k copies fit their expert's capacity."""
    order, _ = expert_order(top, idx, num_experts, policy)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(order.shape[1], device=order.device)
                                            .expand_as(order).contiguous())
    return rank.T.gather(1, idx) < capacity


def batched_experts(rows: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """SwiGLU experts on rows [L, R, H] with weights [L, 2I, H] and [L, H, I]: one batched
    GEMM per projection (the per-expert ``F.linear`` of ``MoE._run``, batched). With equal
    group sizes a grouped GEMM such as ``torch._grouped_mm`` does the same single launch,
    so it is not used."""
    gate, up = torch.bmm(rows, w_gate_up.transpose(1, 2)).chunk(2, dim=-1)
    return torch.bmm(F.silu(gate) * up, w_down.transpose(1, 2))
