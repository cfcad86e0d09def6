"""Per-action timing inside torch's pipeline runtime: timed stages and runtime, a stage's
backward cut layer by layer, and fused pairs run by the overlap runtime with timing.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining._backward import stage_backward, stage_backward_input, stage_backward_weight
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

from planner.core.schedule import ActionKind
from planner.replay.options import ReplayOptions
from profiler.timing import Clock  # the one clock (re-exported for the replay worker)
from profiler.trace.names import LOSS_KIND
from profiler.trace.record import work_range

__all__ = ["Clock", "Span", "Recorder", "TimedStage", "TimedRuntime", "LayerCuts", "LayerGroups", "attach_timed"]


# ---- timed stages and runtime -------------------------------------------------------------------
# Per-action timing inside torch's pipeline runtime, on CPU or GPU.
#
# Each stage's compute entry points (``forward_one_chunk``, ``backward_one_chunk``,
# ``backward_weight_one_chunk``) and the runtime's loss computation are wrapped so every
# call leaves one span ``(stage, kind, microbatch, start, end)``. Waiting for a receive
# happens before these calls in ``_PipelineScheduleRuntime._perform_action``, so a span
# is compute only; the bubble is what lies between spans. The loss of the last stage is
# part of its forward (the planner counts it in the head's F).
#
# Clocks: ``time.perf_counter`` on CPU; CUDA events on GPU (recorded on the current
# stream, resolved after a synchronize, so timing does not stall the pipeline).


@dataclass(frozen=True)
class Span:
    """One timed compute call, seconds from the step's start."""

    stage: int
    kind: str
    microbatch: int
    start: float
    end: float


class Recorder:
    """Collects marks during a step and turns them into ``Span``s afterwards."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.base: Any = None
        self.open: list[tuple[int, str, int, Any, Any]] = []

    def begin_step(self) -> None:
        """Reset and mark the step's start."""
        self.open = []
        self.base = self.clock.mark()

    def record(self, stage: int, kind: str, microbatch: int, start: Any, end: Any) -> None:
        """Keep one call's marks."""
        self.open.append((stage, kind, microbatch, start, end))

    def extend_last(self, end: Any) -> None:
        """Move the end of the latest span (the loss follows the last stage's forward)."""
        s, k, m, start, _ = self.open[-1]
        self.open[-1] = (s, k, m, start, end)

    def spans(self) -> list[Span]:
        """The step's spans, in call order."""
        sec = self.clock.seconds
        return [Span(s, k, m, sec(self.base, a), sec(self.base, b)) for s, k, m, a, b in self.open]


class TimedStage(PipelineStage):
    """``PipelineStage`` whose compute calls leave spans in a ``Recorder``; with
    ``cut_layers`` (default) and a submodule holding ``layers``, the backward of a
    microbatch whose backward is split (I, then W) runs layer by layer
    ([Note: layer cuts]); ``whole_backward`` names the microbatches whose backward on this
    stage is one full B, which keep the stage's graph whole ([Note: whole B])."""

    def __init__(self, *args: Any, recorder: Recorder, cut_layers: bool = True,
                 whole_backward: frozenset[int] = frozenset(), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = recorder
        layers = getattr(self.submod, "layers", None)
        self.cuts = LayerCuts(list(layers.values())) if cut_layers and layers is not None else None
        self.whole_backward = whole_backward
        self._bwd_chunk: int | None = None

    def _cut(self, chunk: int | None) -> bool:
        """[Note: whole B] Cutting exists for the split backward, whose W would otherwise walk
        the stage's graph once per parameter group; a full B walks it once either way, and
        cut it costs one ``stage_backward`` call per layer: measured on one CPU core,
        Qwen3-Next layers 1-26 at 1/32 width, full recomputation, emulated link, B 446 ms cut
        against 397-407 ms whole (the cost table's per-layer B sums to 415 ms)."""
        return self.cuts is not None and chunk not in self.whole_backward

    def backward_maybe_with_nosync(self, backward_type: str, bwd_kwargs: dict,
                                   last_backward: bool = False) -> tuple[Any, Any]:
        if not self._cut(self._bwd_chunk):
            return super().backward_maybe_with_nosync(backward_type, bwd_kwargs, last_backward=last_backward)
        return self.cuts.backward(self._bwd_chunk, backward_type, bwd_kwargs)

    def _timed(self, kind: str, mb: int, fn: Any, *args: Any, **kwargs: Any) -> Any:
        start = self.recorder.clock.mark()
        out = fn(*args, **kwargs)
        self.recorder.record(self.stage_index, kind, mb, start, self.recorder.clock.mark())
        return out

    def forward_one_chunk(self, fwd_chunk_id: int, *args: Any, **kwargs: Any) -> Any:
        cut = self._cut(fwd_chunk_id)
        if cut:
            self.cuts.forward_chunk(fwd_chunk_id)
        try:
            return self._timed(ActionKind.F, fwd_chunk_id, super().forward_one_chunk, fwd_chunk_id, *args, **kwargs)
        finally:
            if cut:
                self.cuts.forward_done()

    def backward_one_chunk(self, bwd_chunk_id: int, loss: Any = None, full_backward: bool = True,
                           last_backward: bool = False) -> None:
        kind = ActionKind.B if full_backward else ActionKind.I
        self._bwd_chunk = bwd_chunk_id
        self._timed(kind, bwd_chunk_id, super().backward_one_chunk, bwd_chunk_id, loss=loss,
                    full_backward=full_backward, last_backward=last_backward)

    def backward_weight_one_chunk(self, bwd_chunk_id: int, last_backward: bool = False) -> None:
        self._bwd_chunk = bwd_chunk_id
        self._timed(ActionKind.W, bwd_chunk_id, super().backward_weight_one_chunk, bwd_chunk_id,
                    last_backward=last_backward)


class TimedRuntime(_PipelineScheduleRuntime):
    """torch's schedule runtime with the loss timed as part of the last stage's forward."""

    def __init__(self, *args: Any, recorder: Recorder, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = recorder

    def _maybe_compute_loss(self, stage: Any, output: Any, target_mbs: Any, mb_index: int,
                            loss_kwargs: Any = None) -> None:
        layers = getattr(stage.submod, "layers", None)
        last = list(layers.values())[-1] if stage.is_last and layers else None
        # traced: the loss's own range on the last layer, which the importer adds to its F
        with work_range(last, LOSS_KIND) if last is not None else contextlib.nullcontext():
            super()._maybe_compute_loss(stage, output, target_mbs, mb_index, loss_kwargs)
        if stage.is_last and self._loss_fn is not None:
            self.recorder.extend_last(self.recorder.clock.mark())


# ---- layer cuts ---------------------------------------------------------------------------------
# A stage's backward layer by layer: the autograd graph cut at every layer boundary.
#
# [Note: layer cuts] torch's split backward (``torch/distributed/pipelining/_backward.py``,
# torch 2.13) computes a stage's weight gradient W as one ``torch.autograd.grad`` call per
# *parameter group*, rooted at the group's intermediates. The autograd engine walks every
# node reachable from its roots before it runs anything (``compute_dependencies``; the
# ``min_topo_nr`` pruning never applies, since weights are leaves of topological number
# 0), and from an intermediate of layer k that is the whole graph of layers k-1, ..., 0
# below it. So W of a stage of n layers walks about groups x n/2 layers of graph: it grows
# with the square of the stage's depth. Measured on the CPU (Qwen3-Next at scale 0.05,
# sequence 256, one thread): layers 26..50 in one stage, 360 parameter groups over 10,007
# autograd nodes, W took 0.71-0.92 s, while the same layers' W timed one by one sums to
# about 0.15 s; 360 ``run_backward`` calls of about 2 ms each were the difference. The
# profiler times each layer (each segment) on a graph of its own, and the planner's cost
# model adds layers; production runtimes do the same (Megatron-Core's zero-bubble and
# combined-1F1B paths run each module's own weight-gradient function). The replay was
# the side out of line with both, so it cuts.
#
# ``LayerCuts`` hooks the layers of a stage: during a recorded forward each layer after
# the first receives a detached leaf copy of its input (same storage, no copy of data),
# and the (input, output) of every layer is kept per microbatch. ``backward`` then
# chains torch's own functions layer by layer, last to first: ``stage_backward_input``
# per layer for I (its parameter groups kept per layer), ``stage_backward_weight`` per
# layer for W, ``stage_backward`` per layer for a full backward. Gradients are the same
# as one backward through the whole stage (the replay's gradient check compares them
# with a single-process reference); every walk stays inside one layer.


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
                with work_range(layer, ActionKind.W):
                    stage_backward_weight(layer.parameters(), groups)
            return (), None
        rec = self.records.pop(chunk)
        outputs, grads = kwargs["stage_output"], kwargs["output_grads"]
        kept: list[tuple[nn.Module, list[dict[str, Any]]]] = []
        for j in range(len(rec) - 1, -1, -1):
            inputs = kwargs["input_values"] if j == 0 else [rec[j][0]]
            if backward_type == "full":
                with work_range(self.layers[j], ActionKind.B):
                    dinputs = stage_backward(outputs, grads, inputs)
            else:
                if isinstance(outputs, torch.Tensor):
                    outputs = (outputs,)
                with work_range(self.layers[j], ActionKind.I):
                    dinputs, groups = stage_backward_input(list(outputs), grads, inputs,
                                                           self.layers[j].parameters())
                kept.append((self.layers[j], groups))
            if j:
                leaf = rec[j][0]
                outputs, grads = (rec[j - 1][1],), (dinputs[0],)
                leaf.grad = None
        return tuple(dinputs), (LayerGroups(per_layer=tuple(kept)) if backward_type == "input" else None)


# ---- fused pairs --------------------------------------------------------------------------------
# Fused pairs in a replay: the overlap runtime registered with timing (and test faults).
#
# ``attach_timed`` registers ``planner.runtime.overlap_f_b`` for ``OVERLAP_F_B`` on the
# replay's runtime. A pair is recorded as two spans in plan order: its forward part
# covers the whole pair, its backward part is zero-length at the pair's end, so busy time
# counts the pair once and ``measure.action_timeline`` matches spans to actions as for
# any other action.


def _pair_fault(runtime: TimedRuntime, b_act: Any, opts: ReplayOptions, rank: int) -> None:
    """``pair-die`` / ``pair-raise`` (tests): the backward half of this rank's next pair
    exits the process or raises, while the forward half runs."""
    kind, _, target = (opts.fault or "").partition(":")
    if not kind.startswith("pair-") or int(target) != rank:
        return
    stage = next(st for st in runtime._stages if st.stage_index == b_act.stage_index)

    def broken(*args: Any, **kwargs: Any) -> None:
        if kind == "pair-die":
            os._exit(17)
        raise RuntimeError("injected fault in the backward half of a fused pair")
    stage.backward_one_chunk = broken  # type: ignore[method-assign]


def attach_timed(runtime: TimedRuntime, recorder: Recorder, opts: ReplayOptions, rank: int) -> None:
    """Register the overlap runtime; each pair leaves its two spans in plan order (forward
    part: the whole pair; backward part: zero length at its end)."""
    from torch.distributed.pipelining.schedules import OVERLAP_F_B

    from planner.runtime import overlap_f_b, split_pair

    def timed(action: Any, ctx: Any) -> None:
        f_act, b_act = split_pair(action)
        _pair_fault(runtime, b_act, opts, rank)
        first = len(recorder.open)
        start = recorder.clock.mark()
        overlap_f_b(action, ctx, timeout_s=opts.timeout_s)
        end = recorder.clock.mark()
        b_kind = ActionKind.B if b_act.computation_type.name == "FULL_BACKWARD" else ActionKind.I
        recorder.open[first:] = [(f_act.stage_index, ActionKind.F, f_act.microbatch_index, start, end),
                                 (b_act.stage_index, b_kind, b_act.microbatch_index, end, end)]

    runtime.register_custom_function(OVERLAP_F_B, timed)
