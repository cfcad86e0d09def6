"""Schedulable layers as torch modules: embedding, decoder block, MTP block, head.

Forward conventions (what a pipeline stage chains):

- embedding: int64 token ids [B, T] -> hidden [B, T, H];
- decoder and MTP layers: hidden [B, T, H] -> hidden [B, T, H];
- head: hidden -> logits [B, T, V]; ``loss_fn(logits, targets)`` is the cross-entropy.

A decoder block is pre-norm: ``x1 = x + mixer(norm(x))``, ``y = x1 + ffn(norm(x1))``.
An MTP layer (DeepSeek-V3 paper, sec. 2.2) projects ``[norm(h); norm(e)]`` (2H -> H),
runs a decoder block and its own norm + LM head + cross-entropy; its hidden output
is its input, with the MTP loss attached to the autograd graph the way Megatron's
``MTPLossAutoScaler`` does (identity forward, gradient 1 into the loss in backward).
Simplified: the next-token embedding ``e`` is the input hidden state shifted by one
position, and the MTP targets are fixed pseudo-random token ids, since a hidden ->
hidden layer has no token ids; the work is the same.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from planner.core.model import LayerSpec, ModelSpec
from profiler.layers.attention import GQAttention, MLAttention
from profiler.layers.common import RMSNorm, SwiGLU
from profiler.layers.linear_attention import GatedLinearAttention
from profiler.layers.moe import MoE
from profiler.layers.program import Compute, Ctx, State, Step, moe_steps, run_program

__all__ = ["Embedding", "DecoderLayer", "MtpLayer", "Head", "loss_fn", "ProgramModule"]

QWEN3_NEXT_ROTARY = 0.25
"""Qwen3-Next ``partial_rotary_factor``: share of each attention head that is rotated."""


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of logits [B, T, V] against int64 targets [B, T]."""
    return F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten())


class ProgramModule(nn.Module):
    """A module whose forward is its ``program()`` (see ``profiler.layers.program``)."""

    def program(self) -> tuple[Step, ...]:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return run_program(self.program(), x)


class Embedding(ProgramModule):
    """Token embedding."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)

    def program(self) -> tuple[Step, ...]:
        return (Compute(name="embed", fn=lambda s, c: {"y": self.embed(s["x"])}, inputs=("x",)),)


class Head(ProgramModule):
    """Final norm (RMSNorm unless given) and LM head, returning logits."""

    def __init__(self, hidden: int, vocab: int, norm: nn.Module | None = None) -> None:
        super().__init__()
        self.norm = RMSNorm(hidden) if norm is None else norm
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def program(self) -> tuple[Step, ...]:
        return (Compute(name="head", fn=lambda s, c: {"y": self.lm_head(self.norm(s["x"]))},
                        inputs=("x",)),)


def _mixer(model: ModelSpec, layer: LayerSpec) -> nn.Module:
    if layer.mixer == "mla":
        return MLAttention(model.hidden, model.mla)
    if layer.mixer == "linear":
        return GatedLinearAttention(model.hidden, model.linear)
    gated = model.linear is not None  # Qwen3-Next gates its full-attention output
    return GQAttention(model.hidden, model.attention, output_gate=gated,
                       rotary_fraction=QWEN3_NEXT_ROTARY if gated else 1.0)


class DecoderLayer(ProgramModule):
    """Pre-norm transformer block: mixer (GQA, MLA or gated linear) and SwiGLU or MoE."""

    def __init__(self, model: ModelSpec, layer: LayerSpec, *, ep_group: Any = None) -> None:
        super().__init__()
        self.norm1 = RMSNorm(model.hidden)
        self.mixer = _mixer(model, layer)
        self.norm2 = RMSNorm(model.hidden)
        if layer.ffn == "moe":
            self.moe = MoE(model.hidden, model.moe, sigmoid_scores=model.mla is not None,  # DeepSeek: sigmoid
                           ep_group=ep_group)
        else:
            self.mlp = SwiGLU(model.hidden, model.intermediate)

    def program(self, pre: Callable[[State], torch.Tensor] | None = None,
                post: Callable[[torch.Tensor, State], torch.Tensor] | None = None,
                extra: tuple[str, ...] = ()) -> tuple[Step, ...]:
        """Steps of the block; ``pre`` maps the state to the block input and ``post``
        (block output, state) to the layer output, reading ``extra`` state names."""
        pre = pre or (lambda s: s["x"])
        post = post or (lambda y, s: y)

        def attn(s: State) -> torch.Tensor:
            h = pre(s)
            return h + self.mixer(self.norm1(h))

        if not hasattr(self, "moe"):
            def dense(s: State, c: Ctx) -> State:
                x1 = attn(s)
                return {"y": post(x1 + self.mlp(self.norm2(x1)), s)}
            return (Compute(name="layer", fn=dense, inputs=("x",)),)
        return self._moe_program(attn, post, extra)

    def _moe_program(self, attn: Callable[[State], torch.Tensor],
                     post: Callable[[torch.Tensor, State], torch.Tensor],
                     extra: tuple[str, ...]) -> tuple[Step, ...]:
        moe = self.moe
        group = moe.group

        def route(s: State, c: Ctx) -> State:
            x1 = attn(s)
            normed = self.norm2(x1)
            c["shape"] = normed.shape
            send, weights = moe.route(normed.flatten(0, -2), c)
            return {"x1": x1, "normed": normed, "send": send, "weights": weights}

        def finish(s: State, c: Ctx) -> State:
            normed = s["normed"]
            out = moe.finish(s["back"], s["weights"], normed.flatten(0, -2), c)
            return {"y": post(s["x1"] + out.view(c["shape"]), s)}

        padded = moe.capacity is not None and moe.capacity.pad
        return moe_steps(route, moe.experts, finish, group, counts=not padded,
                         finish_inputs=("x1", "normed", "back", "weights", *extra))


class _AttachLoss(torch.autograd.Function):
    """Identity on the hidden state; backward also sends gradient 1 into the attached loss
    (Megatron ``MTPLossAutoScaler``)."""

    @staticmethod
    def forward(ctx, hidden, loss):  # noqa: D401 - autograd signature
        ctx.save_for_backward(loss)
        return hidden.clone()

    @staticmethod
    def backward(ctx, grad):
        (loss,) = ctx.saved_tensors
        return grad, torch.ones_like(loss)


class MtpLayer(ProgramModule):
    """Multi-token-prediction layer: projection, decoder block, norm + LM head + loss."""

    def __init__(self, model: ModelSpec, layer: LayerSpec, *, ep_group: Any = None) -> None:
        super().__init__()
        self.hnorm = RMSNorm(model.hidden)
        self.enorm = RMSNorm(model.hidden)
        self.eh_proj = nn.Linear(2 * model.hidden, model.hidden, bias=False)
        self.block = DecoderLayer(model, layer, ep_group=ep_group)
        self.head = Head(model.hidden, model.vocab)
        self.vocab = model.vocab

    def _pre(self, s: State) -> torch.Tensor:
        x = s["x"]
        return self.eh_proj(torch.cat((self.hnorm(x), self.enorm(x.roll(-1, dims=1))), dim=-1))

    def _post(self, y: torch.Tensor, s: State) -> torch.Tensor:
        logits = self.head.lm_head(self.head.norm(y))
        n = logits.shape[0] * logits.shape[1]
        targets = (torch.arange(n, device=logits.device) * 7919 % self.vocab).view(logits.shape[:2])
        return _AttachLoss.apply(s["x"], loss_fn(logits, targets))

    def program(self) -> tuple[Step, ...]:
        return self.block.program(pre=self._pre, post=self._post, extra=("x",))
