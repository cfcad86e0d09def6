"""Per-layer routing imbalance factors used to scale expert compute and all-to-all."""

from __future__ import annotations

from planner.core.model import ModelSpec

__all__ = ["layer_imbalance"]


def layer_imbalance(model: ModelSpec, per_moe_layer: dict[int, float] | None) -> list[float]:
    """One factor per layer (busiest EP rank load / mean; 1.0 = balanced or not MoE)."""
    out = [1.0] * model.num_layers
    for idx, value in (per_moe_layer or {}).items():
        if model.layers[idx].is_moe:
            out[idx] = max(1.0, float(value))
    return out
