"""Activation recomputation in the modes the planner emits: none, selective, full, op.

- ``full``: every layer keeps only its input; its forward runs again during its
  backward (Megatron ``--recompute-granularity full --recompute-method uniform
  --recompute-num-layers 1``).
- ``selective``: only the token mixer (attention, MLA or gated linear attention) of
  each decoder and MTP layer is recomputed, the largest activation per FLOP (Megatron
  ``--recompute-granularity selective --recompute-modules core_attn``; Korthikanti et
  al. 2022, "Reducing Activation Recomputation in Large Transformer Models", sec. 5).
- ``op``: torchtitan's per-op selective checkpointing around each decoder layer
  (``planner.core.op_sac``): every second matmul's output and the attention's kept.
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

from planner.core.cluster import RECOMPUTE_MODES
from planner.core.op_sac import OP, keeps_matmul

__all__ = ["RECOMPUTE_MODES", "apply_recompute"]


def _op_context():
    """torchtitan's per-op policy (``planner.core.op_sac``) as checkpoint contexts: the
    outputs of matmuls the policy keeps, of the attention kernels, of reduce-scatters and of
    ``max`` are saved, the rest recomputed; the matmul count restarts with each layer's
    forward and again with its recompute (torchtitan's ``_custom_policy``)."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ops = torch.ops.aten
    saved = {ops.mm.default, ops.max.default, torch.ops._c10d_functional.reduce_scatter_tensor.default,
             *(getattr(ops, name).default for name in _SDPA if hasattr(ops, name))}
    count = {False: 0, True: 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if func is ops.mm.default:
            count[ctx.is_recompute] += 1
            keep = keeps_matmul(count[ctx.is_recompute])
        else:
            keep = func in saved
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


_SDPA = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
         "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_cudnn_attention")
"""The attention kernels torchtitan's list saves, with the CPU and cuDNN ones torch picks here."""



def _checkpointed(forward: Any, *args: Any, context_fn: Any = None, **kwargs: Any) -> Any:
    if context_fn is None:
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, context_fn=context_fn, **kwargs)


def _wrap(module: nn.Module, context_fn: Any = None) -> None:
    if not getattr(module, "_ppplan_recompute", False):
        module.forward = functools.partial(_checkpointed, module.forward, context_fn=context_fn)  # type: ignore[method-assign]
        module._ppplan_recompute = True  # type: ignore[assignment]


def apply_recompute(layers: list[nn.Module], mode: str) -> None:
    """Make ``layers`` (one module per schedulable layer) recompute as ``mode`` says."""
    if mode not in RECOMPUTE_MODES:
        raise ValueError(f"unknown recompute mode {mode!r}; expected one of {RECOMPUTE_MODES}")
    for layer in layers:
        if mode == "full":
            _wrap(layer)
        elif mode == OP:
            if any(isinstance(getattr(sub, "mixer", None), nn.Module) for sub in layer.modules()):
                _wrap(layer, context_fn=_op_context)
        elif mode == "selective":
            for sub in layer.modules():
                mixer = getattr(sub, "mixer", None)
                if isinstance(mixer, nn.Module):
                    _wrap(mixer)
