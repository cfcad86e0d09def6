"""Expert parallelism in a replay: pp x ep processes laid out as Megatron lays them out.

Global rank = pp_rank x ep + ep_rank (Megatron's default order ``tp-cp-ep-dp-pp``: EP
varies faster than PP; megatron/core/parallel_state.py). The ``ep`` ranks of one
pipeline stage form its expert-parallel group: each holds ``experts / ep`` of every
MoE layer's experts and its own batch (EP is carved out of data parallelism), and
MoE layers send tokens to the other ranks' experts with real all-to-alls. The ranks
with one EP index form a pipeline group that runs the plan's schedule.

Gradients: after the gradient-check step, non-expert gradients are averaged over the
EP group (the data-parallel all-reduce) and expert gradients divided by ``ep``
(they already sum every rank's tokens through the all-to-all backward), which is the
mean over the ``ep`` batches the single-process reference computes. Each token's
activations and input gradients are the reference's to the last bit (experts run each
source rank's rows apart: [Note: one GEMM per source rank] in ``profiler.layers.moe``);
only the weight gradients' sums over ranks and microbatches add in another order.
Timed steps do not all-reduce (the plan does not time data-parallel gradient sync).
Timings and spans are reported for the pipeline group of EP index 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["Layout", "make_layout", "release_layout", "sync_gradients", "merge_ranks", "is_expert_param"]


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Where this process sits in the pp x ep grid, and its groups."""

    pp: int
    """Pipeline ranks."""
    ep: int
    """Expert-parallel ranks per stage."""
    rank: int
    """Global rank."""
    pp_group: Any
    """This rank's pipeline group (WORLD when ep == 1)."""
    ep_group: Any
    """This rank's expert-parallel group (None when ep == 1)."""

    @property
    def pp_rank(self) -> int:
        return self.rank // self.ep

    @property
    def ep_rank(self) -> int:
        return self.rank % self.ep


def make_layout(pp: int, ep: int, rank: int) -> Layout:
    """Create every pipeline and expert-parallel group (all ranks call this, same order)."""
    if ep == 1:
        return Layout(pp=pp, ep=1, rank=rank, pp_group=dist.group.WORLD, ep_group=None)
    pp_groups = [dist.new_group([p * ep + e for p in range(pp)]) for e in range(ep)]
    ep_groups = [dist.new_group([p * ep + e for e in range(ep)]) for p in range(pp)]
    return Layout(pp=pp, ep=ep, rank=rank, pp_group=pp_groups[rank % ep], ep_group=ep_groups[rank // ep])


def release_layout(layout: Layout) -> None:
    """Destroy the groups ``make_layout`` made for this rank (none when ep == 1), leaving the
    default group alive."""
    if layout.ep > 1:
        dist.destroy_process_group(layout.ep_group)
        dist.destroy_process_group(layout.pp_group)


def is_expert_param(name: str) -> bool:
    """Routed-expert weights (held in slices across the EP group)."""
    return any(k in name for k in (".moe.w_gate_up", ".moe.w_down",  # native, then transformers'
                                    ".experts.gate_up_proj", ".experts.down_proj"))


def sync_gradients(mods: list, layout: Layout) -> None:
    """Mean over the EP group's batches (see the module doc); no-op when ep == 1."""
    if layout.ep == 1:
        return
    for m in mods:
        for name, p in m.named_parameters():
            if p.grad is None:
                continue
            if not is_expert_param(name):
                dist.all_reduce(p.grad, group=layout.ep_group)
            p.grad /= layout.ep


def merge_ranks(gathered: list[list[dict[str, Any]]], ep: int) -> list[list[dict[str, Any]]]:
    """Per pipeline rank, the EP-index-0 record with its rank set to the pipeline rank, the
    losses of every EP rank (in EP order) and the full expert gradients (slices joined)."""
    if ep == 1:
        return gathered
    out = []
    for p in range(len(gathered) // ep):
        group = gathered[p * ep:(p + 1) * ep]
        plans = []
        for j, rec in enumerate(group[0]):
            grads = dict(rec["grads"])
            for name in grads:
                if is_expert_param(name):
                    grads[name] = torch.cat([g[j]["grads"][name] for g in group])
            losses = [x for g in group for x in g[j]["losses"]]
            plans.append({**rec, "rank": p, "grads": grads, "losses": losses})
        out.append(plans)
    return out
