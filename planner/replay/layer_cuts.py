"""A stage's backward layer by layer: the autograd graph cut at every layer boundary.

[Note: layer cuts] torch's split backward (``torch/distributed/pipelining/_backward.py``,
torch 2.13) computes a stage's weight gradient W as one ``torch.autograd.grad`` call per
*parameter group*, rooted at the group's intermediates. The autograd engine walks every
node reachable from its roots before it runs anything (``compute_dependencies``; the
``min_topo_nr`` pruning never applies, since weights are leaves of topological number
0), and from an intermediate of layer k that is the whole graph of layers k-1, ..., 0
below it. So W of a stage of n layers walks about groups x n/2 layers of graph: it grows
with the square of the stage's depth. Measured on the CPU (Qwen3-Next at scale 0.05,
sequence 256, one thread): layers 26..50 in one stage, 360 parameter groups over 10,007
autograd nodes, W took 0.71-0.92 s, while the same layers' W timed one by one sums to
about 0.15 s; 360 ``run_backward`` calls of about 2 ms each were the difference. The
profiler times each layer (each segment) on a graph of its own, and the planner's cost
model adds layers; production runtimes do the same (Megatron-Core's zero-bubble and
combined-1F1B paths run each module's own weight-gradient function). The replay was
the side out of line with both, so it cuts.

``LayerCuts`` hooks the layers of a stage: during a recorded forward each layer after
the first receives a detached leaf copy of its input (same storage, no copy of data),
and the (input, output) of every layer is kept per microbatch. ``backward`` then
chains torch's own functions layer by layer, last to first: ``stage_backward_input``
per layer for I (its parameter groups kept per layer), ``stage_backward_weight`` per
layer for W, ``stage_backward`` per layer for a full backward. Gradients are the same
as one backward through the whole stage (the replay's gradient check compares them
with a single-process reference); every walk stays inside one layer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.pipelining._backward import (stage_backward, stage_backward_input,
                                                     stage_backward_weight)

__all__ = ["LayerCuts", "LayerGroups"]


@dataclass(frozen=True, kw_only=True)
class LayerGroups:
    """What the input-gradient pass leaves for W: each layer's parameter groups."""

    per_layer: tuple[tuple[nn.Module, list[dict[str, Any]]], ...]
    """(layer, torch's parameter groups of that layer), any order."""


class LayerCuts:
    """Records each layer's (input, output) per microbatch and runs the backward layer by layer."""

    def __init__(self, layers: list[nn.Module]) -> None:
        self.layers = layers
        self.chunk: int | None = None
        """Microbatch being recorded (None: forward passes through uncut, e.g. shape inference)."""
        self.records: dict[int, list[list[Any]]] = {}
        for j, layer in enumerate(layers):
            layer.register_forward_pre_hook(functools.partial(self._enter, j))
            layer.register_forward_hook(functools.partial(self._leave, j))

    def _enter(self, j: int, module: nn.Module, args: tuple) -> tuple | None:
        if self.chunk is None or not torch.is_grad_enabled():
            return None
        rec = self.records.setdefault(self.chunk, [])
        x = args[0]
        if j == 0 or not (isinstance(x, torch.Tensor) and x.requires_grad):
            rec.append([None, None])  # the stage's own input: torch passes it in input_values
            return None
        leaf = x.detach().requires_grad_(True)
        rec.append([leaf, None])
        return (leaf, *args[1:])

    def _leave(self, j: int, module: nn.Module, args: tuple, out: Any) -> None:
        if self.chunk is None or not torch.is_grad_enabled():
            return
        self.records[self.chunk][-1][1] = out

    def forward_chunk(self, chunk: int) -> None:
        """The next forward belongs to microbatch ``chunk``; a stale record is dropped."""
        self.chunk = chunk
        self.records.pop(chunk, None)

    def forward_done(self) -> None:
        """Stop recording."""
        self.chunk = None

    def backward(self, chunk: int, backward_type: str, kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """``PipelineStage.backward_maybe_with_nosync``'s work for microbatch ``chunk``:
        ``(input gradients, parameter groups or None)``."""
        if backward_type == "weight":
            for layer, groups in kwargs["param_groups"].per_layer:
                stage_backward_weight(layer.parameters(), groups)
            return (), None
        rec = self.records.pop(chunk)
        outputs, grads = kwargs["stage_output"], kwargs["output_grads"]
        kept: list[tuple[nn.Module, list[dict[str, Any]]]] = []
        for j in range(len(rec) - 1, -1, -1):
            inputs = kwargs["input_values"] if j == 0 else [rec[j][0]]
            if backward_type == "full":
                dinputs = stage_backward(outputs, grads, inputs)
            else:
                if isinstance(outputs, torch.Tensor):
                    outputs = (outputs,)
                dinputs, groups = stage_backward_input(list(outputs), grads, inputs,
                                                       self.layers[j].parameters())
                kept.append((self.layers[j], groups))
            if j:
                leaf = rec[j][0]
                outputs, grads = (rec[j - 1][1],), (dinputs[0],)
                leaf.grad = None
        return tuple(dinputs), (LayerGroups(per_layer=tuple(kept)) if backward_type == "input" else None)
