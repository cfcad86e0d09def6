"""Classic schedule generators: ``(pp, vpp, microbatches) -> Schedule``.

Generators only emit order; timing, memory and validity are separate passes
(``planner.core.simulate``, ``planner.core.validate``). ``gpipe`` (Huang et al. 2019),
``one_f_one_b`` (PipeDream-flush / Megatron 1F1B, Narayanan et al. 2021) and
``interleaved_1f1b`` (Megatron's interleaved schedule); ``fuse=True`` gives Megatron's
combined 1F1B with EP all-to-all overlap (``--overlap-moe-expert-parallel-comm``), each
steady step's F and B one OVERLAP_F_B action [Note: fused warm-up] at ``one_f_one_b``.
``split_w=True`` emits each backward as I followed at once by W (no deferral), the input
a W-moving pass starts from.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.core.errors import InfeasibleError
from planner.core.schedule import Action, ActionKind, Schedule

__all__ = ["gpipe", "one_f_one_b", "interleaved_1f1b", "GENERATORS"]


def _backward(stage: int, mb: int, split_w: bool) -> list[Action]:
    if split_w:
        return [Action(stage, ActionKind.I, mb), Action(stage, ActionKind.W, mb)]
    return [Action(stage, ActionKind.B, mb)]


def _steady(fwd: Action, stage: int, mb: int, split_w: bool, fuse: bool) -> list[Action]:
    """One steady 1F1B step: ``fwd`` then the backward of (stage, mb), or with ``fuse`` the
    two as one OVERLAP_F_B (its input-gradient part when W is split off, W right after)."""
    bwd = _backward(stage, mb, split_w)
    return [Action.fused(fwd, bwd[0]), *bwd[1:]] if fuse else [fwd, *bwd]


def gpipe(pp: int, microbatches: int, *, split_w: bool = False) -> Schedule:
    """All forwards then all backwards, one stage per rank."""
    sched: Schedule = {}
    for r in range(pp):
        acts = [Action(r, ActionKind.F, m) for m in range(microbatches)]
        for m in range(microbatches):
            acts += _backward(r, m, split_w)
        sched[r] = acts
    return sched


def one_f_one_b(pp: int, microbatches: int, *, split_w: bool = False, fuse: bool = False,
                in_flight: Sequence[int] | None = None) -> Schedule:
    """1F1B with one stage per rank: rank r warms up with pp-1-r forwards, then alternates,
    then drains. ``fuse`` pairs steady-state F(m+warm) and B(m) as one OVERLAP_F_B.
    ``in_flight`` (not with ``fuse``) caps rank r at ``in_flight[r]`` microbatches in flight
    (``in_flight[r] - 1`` warm-up forwards): the 1F1B order for a memory budget below p
    microbatches. Caps must not grow with r (rank r+1 would wait for a forward rank r
    holds back behind a backward it waits for: a deadlock).

    [Note: fused warm-up] Fusing couples neighbouring stages (step k of stage s needs step
    k of s+1 for its gradient, and s+1 needs an earlier step of s for its input), so rank r
    warms up with 2(pp-1-r)+1 forwards, as interleaved 1F1B does; with pp-r warm-ups the
    steady cycle would be two fused steps long.
    """
    if in_flight is not None and (fuse or min(in_flight) < 1
                                  or any(b > a for a, b in zip(in_flight, in_flight[1:]))):
        raise ValueError(f"in_flight must be >= 1 and not grow over the ranks, without fuse: {list(in_flight)}")
    sched: Schedule = {}
    for r in range(pp):
        warm = min(2 * (pp - r - 1) + 1 if fuse else pp - r - 1, microbatches)
        if in_flight is not None:
            warm = min(warm, in_flight[r] - 1)
        acts = [Action(r, ActionKind.F, m) for m in range(warm)]
        for k in range(microbatches - warm):
            acts += _steady(Action(r, ActionKind.F, warm + k), r, k, split_w, fuse)
        for m in range(max(microbatches - warm, 0), microbatches):
            acts += _backward(r, m, split_w)
        sched[r] = acts
    return sched


def interleaved_1f1b(pp: int, vpp: int, microbatches: int, *, split_w: bool = False,
                     fuse: bool = False) -> Schedule:
    """Megatron interleaved 1F1B over vpp chunks per rank (loop placement: stage of chunk c
    on rank r is c * pp + r); needs M divisible by pp. ``fuse`` is what Megatron runs with
    ``--overlap-moe-expert-parallel-comm`` and virtual stages
    (``combined_1f1b_schedule_for_interleaved_pipelining``): one more warm-up forward, so
    that each steady step runs F of virtual microbatch k + warm-up beside B of virtual
    microbatch k, which are always independent; F and B orders stay those of the plain
    interleaved schedule."""
    if vpp == 1:
        return one_f_one_b(pp, microbatches, split_w=split_w, fuse=fuse)
    if microbatches % pp:
        # no counts suggested: this rule does not know the per-replica batch a count must divide
        # (DeepSeek-V3's 120 against pp 16 has no such count; 16, 32, 48 were refused in turn)
        raise InfeasibleError(f"interleaved 1F1B needs microbatches divisible by pp={pp}; got {microbatches} "
                              f"(give --microbatches a multiple of {pp} that divides the per-replica batch, "
                              f"changing --global-batch where none does)")
    total = microbatches * vpp
    group = pp * vpp

    def unit(k: int, backward: bool) -> tuple[int, int]:
        chunk = (k // pp) % vpp
        if backward:
            chunk = vpp - 1 - chunk
        return chunk, (k // group) * pp + k % pp

    sched: Schedule = {}
    for r in range(pp):
        warm = min((pp - r - 1) * 2 + (vpp - 1) * pp + (1 if fuse else 0), total)
        acts: list[Action] = []
        for k in range(warm):
            c, m = unit(k, False)
            acts.append(Action(c * pp + r, ActionKind.F, m))
        for k in range(total - warm):
            c, m = unit(warm + k, False)
            fwd = Action(c * pp + r, ActionKind.F, m)
            c, m = unit(k, True)
            acts += _steady(fwd, c * pp + r, m, split_w, fuse)
        for k in range(total - warm, total):
            c, m = unit(k, True)
            acts += _backward(c * pp + r, m, split_w)
        sched[r] = acts
    return sched


GENERATORS = ("gpipe", "1f1b", "interleaved")
"""Names accepted by ``planner`` for the classic generators."""
