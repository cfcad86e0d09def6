"""The model a replay runs: the plan's model at a reduced width, cut into stages.

Layers come from the measured profiler's modules (``profiler.layers.build_layer``, or
with ``modules="transformers"`` the model family's own transformers classes,
``profiler.hf.build_hf_layer``), built from one seed so that a stage built on any rank
and the single-process reference hold the same numbers. A stage is its layers in order, named
``layers.<global index>`` so gradients can be compared by name across ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from planner.core.errors import InputError
from planner.core.hf_config import load_model, resolve_model_path
from planner.core.model import ModelSpec
from planner.core.plan import Plan

__all__ = ["ReplayModel", "StageModule", "replay_model", "build_stage", "make_batch", "loss_fn"]


@dataclass(frozen=True, kw_only=True)
class ReplayModel:
    """What every rank needs to build its stages and its data identically."""

    spec: ModelSpec
    """The model at the replay width (``scaled_model`` of the plan's model)."""
    scale: float
    """Width factor relative to the plan's model."""
    seq_len: int
    """Tokens per sequence."""
    microbatch_size: int
    """Sequences per microbatch."""
    microbatches: int
    """Microbatches per step."""
    seed: int = 0
    """Seed of the weights and of the token data."""
    ep: int = 1
    """Expert-parallel size: ranks of one stage, each with its own data (EP is carved out
    of data parallelism, as in Megatron) and ``experts / ep`` of each MoE layer's experts."""
    moe_capacity: Any = None
    """Megatron's capacity mode of the MoE layers (``profiler.layers.moe_capacity.CapacityMode``);
    None = dropless."""
    modules: str = "native"
    """Where the layers come from: native (``profiler.layers``) or transformers (``profiler.hf``)."""
    raw_config: dict[str, Any] | None = None
    """The model's parsed config.json (read by transformers modules)."""


def replay_model(plan: Plan, *, scale: float, seq_len: int, seed: int = 0, ep: int = 1,
                 moe_capacity: Any = None, modules: str = "native") -> ReplayModel:
    """Load the plan's model, check its layer count, EP and module source, and scale its width."""
    from profiler.layers import scaled_model

    spec = load_model(str(plan.model["name"]))
    if spec.num_layers != int(plan.model["num_layers"]):
        raise InputError("plan.model.num_layers", f"is {plan.model['num_layers']} but model "
                         f"{spec.name} has {spec.num_layers} layers", "re-plan this model")
    small = scaled_model(spec, scale)
    if ep > 1 and small.moe is not None and small.moe.num_experts % ep:
        raise InputError("--ep", f"{ep} does not divide the {small.moe.num_experts} experts of "
                         f"{spec.name} at scale {scale:g}", "pick an --ep that divides the expert count")
    raw = None
    if modules != "native":
        from profiler.hf import check_source
        from profiler.hf.config import raw_config

        raw = raw_config(spec, resolve_model_path(str(plan.model["name"])))
        check_source(spec, raw, modules=modules, capacity=moe_capacity)
    return ReplayModel(spec=small, scale=scale, seq_len=seq_len,
                       microbatch_size=int(plan.microbatches.get("size", 1)),
                       microbatches=plan.num_microbatches, seed=seed, ep=ep, moe_capacity=moe_capacity,
                       modules=modules, raw_config=raw)


class StageModule(nn.Module):
    """Layers ``[start, end)`` of the model, applied in order."""

    def __init__(self, layers: dict[int, nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleDict({str(k): m for k, m in sorted(layers.items())})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers.values():
            x = layer(x)
        return x


def build_stage(rm: ReplayModel, start: int, end: int, device: torch.device, *,
                ep_group: Any = None) -> StageModule:
    """The stage holding layers ``[start, end)`` on ``device`` (FP32, seeded); MoE layers
    exchange tokens over ``ep_group`` (a process group, or a callable ``layer index ->
    EmulatedLink``), else keep every expert local."""
    from profiler.hf import build_hf_layer
    from profiler.layers import build_layer

    def group(k: int) -> Any:
        return ep_group(k) if callable(ep_group) else ep_group

    def layer(k: int) -> nn.Module:
        if rm.modules == "transformers":
            return build_hf_layer(rm.spec, rm.spec.layers[k], raw=rm.raw_config, seed=rm.seed, ep_group=group(k))
        return build_layer(rm.spec, rm.spec.layers[k], seed=rm.seed, ep_group=group(k),
                           moe_capacity=rm.moe_capacity)

    layers = {k: layer(k) for k in range(start, end)}
    return StageModule(layers).to(device)


def make_batch(rm: ReplayModel, device: torch.device, *, ep_rank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids, targets), each ``[microbatches x microbatch_size, seq_len]``, from the seed
    (each expert-parallel rank draws its own batch)."""
    gen = torch.Generator().manual_seed(rm.seed + 1 + 7919 * ep_rank)
    shape = (rm.microbatches * rm.microbatch_size, rm.seq_len)
    ids = torch.randint(0, rm.spec.vocab, shape, generator=gen)
    target = torch.randint(0, rm.spec.vocab, shape, generator=gen)
    return ids.to(device), target.to(device)


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the head's logits (the profiler's definition)."""
    from profiler.layers import loss_fn as layers_loss

    return layers_loss(logits, target)
