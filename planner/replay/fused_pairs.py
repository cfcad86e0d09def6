"""Fused pairs in a replay: the overlap runtime registered with timing (and test faults).

``attach_timed`` registers ``planner.runtime.overlap_f_b`` for ``OVERLAP_F_B`` on the
replay's runtime. A pair is recorded as two spans in plan order: its forward part
covers the whole pair, its backward part is zero-length at the pair's end, so busy time
counts the pair once and ``measure.action_timeline`` matches spans to actions as for
any other action.
"""

from __future__ import annotations

import os
from typing import Any

from planner.core.schedule import ActionKind
from planner.replay.options import ReplayOptions
from planner.replay.timing import Recorder, TimedRuntime

__all__ = ["attach_timed"]


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
