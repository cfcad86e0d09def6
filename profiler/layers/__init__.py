"""Torch modules for every layer type of the shipped models, at full or reduced width.

``build_layer(model, layer, scale=..., ep_group=..., dtype=..., seed=...)`` returns the
module of one schedulable layer; ``scaled_model`` is the reduced-width spec it is built
from; ``loss_fn`` is the head's cross-entropy. Each module also exposes ``program()``,
its forward as compute segments and all-to-alls (``profiler.layers.program``), which
the profiler times piece by piece.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from planner.core.model import LayerSpec, ModelSpec
from profiler.layers.blocks import DecoderLayer, Embedding, Head, MtpLayer, ProgramModule, loss_fn
from profiler.layers.common import init_parameters
from profiler.layers.moe import MoE
from profiler.layers.moe_capacity import CapacityMode
from profiler.layers.program import Compute, Exchange, Step, run_program
from profiler.layers.scaling import scaled_model

__all__ = ["build_layer", "scaled_model", "loss_fn", "ProgramModule", "Compute", "Exchange",
           "Step", "run_program", "layer_input", "router_weight", "uses_sigmoid_router"]


def build_layer(model: ModelSpec, layer: LayerSpec, *, scale: float = 1.0, ep_group: Any = None,
                dtype: torch.dtype = torch.float32, seed: int = 0,
                moe_capacity: CapacityMode | None = None) -> ProgramModule:
    """The module of ``layer`` of ``model`` at ``scale`` times its width, on the CPU.

    With an expert-parallel ``ep_group`` an MoE layer holds only its rank's experts and
    exchanges tokens with real all-to-alls; without one every expert is local. Weights
    are drawn deterministically from (seed, layer index, parameter name).
    ``moe_capacity``: Megatron's capacity mode for the routed experts (None: dropless;
    see ``profiler.layers.moe_capacity``).
    """
    spec = scaled_model(model, scale)
    module: ProgramModule
    if layer.role == "embedding":
        module = Embedding(spec.vocab, spec.hidden)
    elif layer.role == "head":
        module = Head(spec.hidden, spec.vocab)
    elif layer.role == "mtp":
        module = MtpLayer(spec, layer, ep_group=ep_group)
    else:
        module = DecoderLayer(spec, layer, ep_group=ep_group)
    for sub in module.modules():
        if isinstance(sub, MoE):
            sub.init_experts(seed=seed, layer_index=layer.index)
            sub.capacity = moe_capacity
    init_parameters(module, seed=seed, layer_index=layer.index)
    return module.to(dtype)


def layer_input(model: ModelSpec, layer: LayerSpec, *, scale: float = 1.0, batch: int, seq_len: int,
                dtype: torch.dtype = torch.float32, seed: int = 0,
                device: torch.device | str = "cpu") -> torch.Tensor:
    """A deterministic sample input for ``layer``: token ids for the embedding, else a
    unit-variance hidden state [batch, seq_len, hidden]."""
    spec = scaled_model(model, scale)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + layer.index)
    if layer.role == "embedding":
        return torch.randint(0, spec.vocab, (batch, seq_len), generator=gen).to(device)
    return torch.randn(batch, seq_len, spec.hidden, generator=gen).to(device=device, dtype=dtype)



def uses_sigmoid_router(model: ModelSpec) -> bool:
    """DeepSeek-V3 scores experts with a sigmoid, Qwen3 with a softmax."""
    return model.mla is not None


def router_weight(model: ModelSpec, layer: LayerSpec, *, scale: float = 1.0,
                  seed: int = 0) -> torch.Tensor:
    """The router matrix [experts, hidden] ``build_layer`` gives MoE layer ``layer``,
    drawn without building the experts (same parameter name, same generator)."""
    spec = scaled_model(model, scale)
    holder = nn.Module()
    holder.moe = nn.Module()
    holder.moe.router = nn.Linear(spec.hidden, spec.moe.num_experts, bias=False)
    if layer.role == "mtp":
        outer = nn.Module()
        outer.block = holder
        holder = outer
    init_parameters(holder, seed=seed, layer_index=layer.index)
    return next(holder.parameters()).detach()
