"""Refuse, before starting any process, a replay whose model is too narrow to build or cannot fit in this machine's memory."""

from __future__ import annotations

import os

from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.layer_math import layer_params
from planner.core.plan import Plan
from planner.replay.options import ReplayOptions

__all__ = ["check_fits"]

_BYTES_PER_PARAM = 4 * 3
"""FP32 weights + gradients, and the reference model rank 0 builds for the gradient check."""


def _available_bytes() -> int:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits(plan: Plan, opts: ReplayOptions, *, copies: int = 1) -> None:
    """``InputError`` naming ``--scale`` when the scale is too small to keep the model whole
    (``profiler.layers.scaling`` [Note: smallest scale]) or, on CPU, when the model's weights
    alone exceed free memory (``copies``: plans replayed in one launch, each with its own stages)."""
    import torch

    from planner.replay.worker import resolve_shape
    from profiler.layers import scaled_model

    scale, _ = resolve_shape(plan, opts)
    spec = scaled_model(load_model(str(plan.model["name"])), scale)
    if torch.cuda.is_available():
        return  # a CUDA out-of-memory error is reported by the rank that hits it
    need = sum(layer_params(layer, spec).total for layer in spec.layers) * _BYTES_PER_PARAM * copies
    have = _available_bytes()
    if need > have:
        fit = scale * have / need
        raise InputError("--scale", f"the model at scale {scale:g} needs about {need / 2**30:.1f} GiB "
                         f"for weights and gradients, {have / 2**30:.1f} GiB is free",
                         f"pass --scale {fit:.2g} or smaller")
