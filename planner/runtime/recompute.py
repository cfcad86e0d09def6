"""Activation recomputation in the modes the planner emits: none, selective, full.

- ``full``: every layer keeps only its input; its forward runs again during its
  backward (Megatron ``--recompute-granularity full --recompute-method uniform
  --recompute-num-layers 1``).
- ``selective``: only the token mixer (attention, MLA or gated linear attention) of
  each decoder and MTP layer is recomputed, the largest activation per FLOP (Megatron
  ``--recompute-granularity selective --recompute-modules core_attn``; Korthikanti et
  al. 2022, "Reducing Activation Recomputation in Large Transformer Models", sec. 5).
- ``none``: nothing.

Recomputation uses ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``, which
recomputes on first use of a saved tensor, so it composes with torch's split backward
(I, then W later) and with the overlap runtime: a full recompute of an MoE layer
re-runs its all-to-alls inside the backward half, at comm points like any other.
The forward is wrapped in place (``module.forward``), so parameter names, and so
gradient checks by name, are unchanged.
"""

from __future__ import annotations

import functools
from typing import Any

from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["RECOMPUTE_MODES", "apply_recompute"]

RECOMPUTE_MODES = ("none", "selective", "full")


def _checkpointed(forward: Any, *args: Any, **kwargs: Any) -> Any:
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def _wrap(module: nn.Module) -> None:
    if not getattr(module, "_ppplan_recompute", False):
        module.forward = functools.partial(_checkpointed, module.forward)  # type: ignore[method-assign]
        module._ppplan_recompute = True  # type: ignore[assignment]


def apply_recompute(layers: list[nn.Module], mode: str) -> None:
    """Make ``layers`` (one module per schedulable layer) recompute as ``mode`` says."""
    if mode not in RECOMPUTE_MODES:
        raise ValueError(f"unknown recompute mode {mode!r}; expected one of {RECOMPUTE_MODES}")
    for layer in layers:
        if mode == "full":
            _wrap(layer)
        elif mode == "selective":
            for sub in layer.modules():
                mixer = getattr(sub, "mixer", None)
                if isinstance(mixer, nn.Module):
                    _wrap(mixer)
