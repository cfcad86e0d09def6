"""Per-action timing inside torch's pipeline runtime, on CPU or GPU.

Each stage's compute entry points (``forward_one_chunk``, ``backward_one_chunk``,
``backward_weight_one_chunk``) and the runtime's loss computation are wrapped so every
call leaves one span ``(stage, kind, microbatch, start, end)``. Waiting for a receive
happens before these calls in ``_PipelineScheduleRuntime._perform_action``, so a span
is compute only; the bubble is what lies between spans. The loss of the last stage is
part of its forward (the planner counts it in the head's F).

Clocks: ``time.perf_counter`` on CPU; CUDA events on GPU (recorded on the current
stream, resolved after a synchronize, so timing does not stall the pipeline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

from planner.core.schedule import ActionKind
from planner.replay.layer_cuts import LayerCuts
from profiler.timing import Clock  # the one clock (re-exported for the replay worker)

__all__ = ["Clock", "Span", "Recorder", "TimedStage", "TimedRuntime"]


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
    microbatch whose backward is split (I, then W) runs layer by layer (``layer_cuts``,
    [Note: layer cuts]); ``whole_backward`` names the microbatches whose backward on this
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
        super()._maybe_compute_loss(stage, output, target_mbs, mb_index, loss_kwargs)
        if stage.is_last and self._loss_fn is not None:
            self.recorder.extend_last(self.recorder.clock.mark())
