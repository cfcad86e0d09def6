"""Overlapped layer pairs: F of layer a on one microbatch beside I of layer b on another.

Both layers run as task lists (``profiler.measure_run``); ``run_overlapped`` interleaves
them in the issue order of Megatron's EP overlap. Each repeat times the interleaved run
and, back to back, the same two task lists run one after the other (``F[a] + A_F[a] +
I[b] + A_B[b]``), alternating which goes first (``alternate``), so the hidden share
``1 - OV / serial`` compares runs that saw the same machine state; its median over
repeats is the figure the cost table uses. ``time_pair_calls`` is the same alternation
for a forward and a backward called whole.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from profiler.measure import grad_seed
from profiler.measure_run import LayerRun, Task, run_serial
from profiler.timing import Clock, Stat, collector_off, summarize

__all__ = ["PairTiming", "run_overlapped", "measure_pair", "measure_stage_pairs", "time_pair_calls", "alternate"]


def _advance(queue: deque[Task], pending: list[Any], side: int) -> None:
    """Run this side's next compute segment and start the all-to-alls that follow it."""
    while queue and queue[0].comm:  # a list may start with communication
        if pending[side] is not None:
            pending[side].wait()
        pending[side] = queue.popleft().run()
    if not queue:
        return
    if pending[side] is not None:
        pending[side].wait()
        pending[side] = None
    queue.popleft().run()
    while queue and queue[0].comm:
        if pending[side] is not None:
            pending[side].wait()
        pending[side] = queue.popleft().run()


def run_overlapped(f_tasks: list[Task], b_tasks: list[Task], clock: Clock) -> float:
    """Interleave two task lists (forward first); seconds from start to both done.

    Turns: one compute segment of the forward, then one of the backward, each first waiting
    for the all-to-all its segment needs and then starting the one that follows it without
    waiting. So the forward's dispatch travels while the backward's post-combine gradient
    runs, the backward's combine gradient while the forward's experts run, and so on: the
    issue order of Megatron's EP overlap (F.attn, B.combine, F.dispatch, B.mlp, B.dispatch,
    F.mlp, F.combine, B.attn; Megatron-LM
    megatron/core/models/common/model_chunk_schedule_plan.py). The all-to-alls are
    ``async_op=True`` work handles: gloo's background threads on the CPU, NCCL's own
    stream on a GPU.
    """
    sides = [deque(f_tasks), deque(b_tasks)]
    pending: list[Any] = [None, None]
    start = clock.mark()
    while sides[0] or sides[1]:
        for side in (0, 1):
            _advance(sides[side], pending, side)
    for p in pending:
        if p is not None:
            p.wait()
    end = clock.mark()
    clock.sync()
    return clock.elapsed(start, end)


@dataclass(frozen=True, kw_only=True)
class PairTiming:
    """One measured pair type."""

    ov: Stat
    """Overlapped wall time (F of a beside I of b)."""
    serial: Stat
    """The same two task lists run one after the other, each all-to-all waited on."""
    ratio: Stat
    """Per-repeat OV / serial (1 - hidden share), the two measured back to back."""
    hidden: Stat
    """Per-repeat serial - OV seconds (negative when fused costs more than serial)."""


def alternate(timed: Callable[[bool], float], *, warmup: int, repeats: int) -> PairTiming:
    """``timed(overlapped)`` seconds, overlapped and serial each repeat, alternating which
    runs first so that both see the same machine state; the first ``warmup`` repeats dropped."""
    ov, serial = [], []
    for r in range(warmup + repeats):
        order = (True, False) if r % 2 else (False, True)
        t = {o: timed(o) for o in order}
        if r >= warmup:
            ov.append(t[True])
            serial.append(t[False])
    return _timing(ov, serial)


def _timing(ov: list[float], serial: list[float]) -> PairTiming:
    ratios = [o / s for o, s in zip(ov, serial) if s > 0] or [1.0]
    return PairTiming(ov=summarize(ov), serial=summarize(serial), ratio=summarize(ratios),
                      hidden=summarize([s - o for o, s in zip(ov, serial)]))


def _timed_pair(a: nn.Module, x_a: torch.Tensor, b: nn.Module, x_b: torch.Tensor, clock: Clock,
                losses: tuple[Callable | None, Callable | None], seed: int, overlapped: bool) -> float:
    run_b = LayerRun(b.program(), x_b, list(b.parameters()), loss=losses[1])
    run_serial(run_b.forward_tasks(), clock)  # untimed: b's backward needs its forward
    run_a = LayerRun(a.program(), x_a, list(a.parameters()), loss=losses[0])
    f_tasks = run_a.forward_tasks()
    b_tasks = run_b.backward_tasks(grad_seed(run_b.state["y"], seed))
    if overlapped:
        t = run_overlapped(f_tasks, b_tasks, clock)
    else:
        t = sum(dt for _, dt in run_serial(f_tasks, clock)) + sum(dt for _, dt in run_serial(b_tasks, clock))
    for p in (*a.parameters(), *b.parameters()):
        p.grad = None
    return t


def measure_pair(a: nn.Module, x_a: torch.Tensor, b: nn.Module, x_b: torch.Tensor, *,
                 clock: Clock, warmup: int, repeats: int,
                 loss_a: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 loss_b: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 seed: int = 0) -> PairTiming:
    """F(a, x_a) beside I(b, x_b), overlapped and serial (``alternate``); b's forward runs
    untimed before each."""
    return alternate(lambda o: _timed_pair(a, x_a, b, x_b, clock, (loss_a, loss_b), seed, o),
                     warmup=warmup, repeats=repeats)


Member = tuple[nn.Module, torch.Tensor, "Callable | None"]
"""(module, sample input, loss or None) of one layer."""


def measure_stage_pairs(pairs: list[tuple[Member, Member]], *, clock: Clock, repeats: int,
                        seed: int = 0) -> PairTiming:
    """A stage's steady state as the planner models it: for each (forward layer, backward
    layer) in ``pairs`` (F of layer s+j beside I of layer e-1-j), the two overlapped, then
    the same two serial; per repeat the sums over the stage, so ``ov`` is the stage's
    measured fused time and ``serial`` its unfused one. Each backward layer's forward
    runs untimed first (on a GPU the marks are events, so it is excluded there too)."""
    ov, serial = [], []
    for r in range(repeats):
        order = (True, False) if r % 2 else (False, True)
        sums = {True: 0.0, False: 0.0}
        for (a, x_a, loss_a), (b, x_b, loss_b) in pairs:
            for o in order:
                sums[o] += _timed_pair(a, x_a, b, x_b, clock, (loss_a, loss_b), seed, o)
        ov.append(sums[True])
        serial.append(sums[False])
    return _timing(ov, serial)


def time_pair_calls(forward: Callable[[], Any], backward: Callable[[], Callable[[], Any]], *,
                    fuse: Callable[[Callable[[], Any], Callable[[], Any]], Any], clock: Clock,
                    repeats: int, warmup: int = 2, reset: Callable[[], None] = lambda: None) -> PairTiming:
    """A forward beside a backward, both called whole: one after the other, then fused
    (``fuse(forward, back)``), alternating (``alternate``), the collector held off
    ([Note: manual gc] in ``profiler.timing``). ``backward()`` runs, untimed, the forward
    the backward needs and returns the backward; ``reset`` (untimed) clears gradients.
    The replay and ``benchmarks/overlap_pairs.py`` pass ``planner.runtime``'s turn-taking
    ``run_pair`` as ``fuse``: one pair timer for the profiler, the replay's re-prediction
    and the benchmark."""
    def timed(fused: bool) -> float:
        back = backward()
        t0 = clock.mark()
        if fused:
            fuse(forward, back)
        else:
            forward()
            back()
        t1 = clock.mark()
        reset()
        return clock.seconds(t0, t1)
    with collector_off():
        return alternate(timed, warmup=warmup, repeats=repeats)
