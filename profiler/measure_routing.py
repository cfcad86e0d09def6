"""Routing imbalance from the model's own routers on sample tokens.

Each MoE layer's router, drawn with the same seeded weights ``build_layer`` gives it,
is run on sample hidden states (unit-variance, through the layer's pre-FFN norm);
the tokens per expert, grouped into the ``ep`` contiguous blocks of experts the
expert-parallel ranks hold, give the per-rank load, and the layer's imbalance is
``max / mean`` of that load (the busiest rank sets the pace). Running the whole
model up to each layer would route the hidden states a trained model produces;
with freshly initialised weights they are no more informative than these samples,
and the chain costs tens of seconds on a CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from planner.core.model import ModelSpec
from profiler.layers import layer_input, router_weight, scaled_model, uses_sigmoid_router
from profiler.layers.moe import select_experts
from profiler.routing import rank_imbalance

__all__ = ["sample_imbalance"]


@torch.no_grad()
def sample_imbalance(model: ModelSpec, *, scale: float, ep: int, seq_len: int, batch: int = 1,
                     seed: int = 0) -> tuple[dict[int, float], dict[int, list[int]]]:
    """(imbalance, tokens per expert) per MoE layer index, from sample tokens."""
    imbalance: dict[int, float] = {}
    tokens: dict[int, list[int]] = {}
    spec = scaled_model(model, scale)
    for layer in model.layers:
        if not layer.is_moe:
            continue
        weight = router_weight(model, layer, scale=scale, seed=seed)
        x = layer_input(model, layer, scale=scale, batch=batch, seq_len=seq_len, seed=seed + 1)
        normed = F.rms_norm(x, (spec.hidden,)).flatten(0, -2)  # the pre-FFN norm at init (scale 1)
        _, idx = select_experts(F.linear(normed, weight), spec.moe.top_k,
                                sigmoid=uses_sigmoid_router(model))
        tokens[layer.index] = torch.bincount(idx.flatten(), minlength=spec.moe.num_experts).tolist()
        imbalance[layer.index] = rank_imbalance(tokens[layer.index], ep)
    return imbalance, tokens
