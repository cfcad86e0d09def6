"""A layer as a program: compute segments separated by expert-parallel all-to-alls.

Every layer module describes its forward as a tuple of steps over a named state:
``Compute`` steps read named tensors and add new ones, ``Exchange`` steps move one
tensor across the expert-parallel group with ``all_to_all_single`` (MoE dispatch and
combine). The state starts as ``{"x": input}`` and the layer's output is ``"y"``.
Non-tensor facts a step computes (split sizes, token order) go into a per-run
``ctx`` dict that later steps read.

``run_program`` executes the steps in order with differentiable all-to-alls, which is
what ``module.forward`` does. The profiler runs the same steps itself: it cuts the
autograd graph at every step (each segment's inputs become leaves), so it can time
forward, input-gradient and weight-gradient of each segment, launch the all-to-alls
asynchronously and interleave the segments of two layers (see
``profiler.pairs``). [Note: one program, two runners] keeps the module that is
timed identical to the module that trains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Union

import torch
import torch.distributed as dist

__all__ = ["Compute", "Exchange", "Step", "Ctx", "State", "all_to_all", "run_program"]

State = dict[str, torch.Tensor]
"""Named tensors flowing through a program."""
Ctx = dict[str, Any]
"""Per-run facts written by one step and read by later ones (split sizes, token order)."""


@dataclass(frozen=True, kw_only=True)
class Compute:
    """A compute segment: ``fn(state, ctx)`` returns new named tensors."""

    name: str
    """Segment name (attn, experts, post, layer, embed, head)."""
    fn: Callable[[State, Ctx], State]
    """The computation; reads only ``inputs`` from the state."""
    inputs: tuple[str, ...]
    """State names it reads."""
    expert: bool = False
    """Routed-expert compute: its time scales with the routing imbalance."""


@dataclass(frozen=True, kw_only=True)
class Exchange:
    """An all-to-all of ``state[src]`` into ``state[dst]`` over the expert-parallel group."""

    name: str
    """dispatch or combine."""
    src: str
    """State name sent."""
    dst: str
    """State name received."""
    splits: str
    """``ctx`` key holding (input split sizes, output split sizes) in rows."""
    group: Any
    """The process group."""


Step = Union[Compute, Exchange]


def all_to_all(x: torch.Tensor, in_splits: list[int], out_splits: list[int], group: Any, *,
               async_op: bool = False) -> tuple[torch.Tensor, Any]:
    """Rows of ``x`` split by ``in_splits`` go to each rank; returns (received, work or None)."""
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    work = dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group,
                                  async_op=async_op)
    return out, work


class _AllToAll(torch.autograd.Function):
    """Differentiable all-to-all: the backward sends gradients back along reversed splits."""

    @staticmethod
    def forward(ctx, x, in_splits, out_splits, group):  # noqa: D401 - autograd signature
        ctx.splits, ctx.group = (in_splits, out_splits), group
        return all_to_all(x, in_splits, out_splits, group)[0]

    @staticmethod
    def backward(ctx, grad):
        in_splits, out_splits = ctx.splits
        return all_to_all(grad, out_splits, in_splits, ctx.group)[0], None, None, None


def run_program(steps: tuple[Step, ...], x: torch.Tensor) -> torch.Tensor:
    """Run a layer program end to end (autograd flows through the all-to-alls)."""
    state: State = {"x": x}
    ctx: Ctx = {}
    for step in steps:
        if isinstance(step, Compute):
            state.update(step.fn(state, ctx))
        else:
            in_splits, out_splits = ctx[step.splits]
            state[step.dst] = _AllToAll.apply(state[step.src], in_splits, out_splits, step.group)
    return state["y"]
