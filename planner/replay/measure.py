"""From the spans every rank recorded to the report's figures: the measured step, busy time
and bubble, the prediction error, and where the step differs from the prediction, per rank
and term by term.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from planner.core.layer_math import layer_forward_flops
from planner.core.plan import Plan
from planner.core.schedule import OVERLAP
from planner.core.simulate import SimResult
from planner.replay.lowering import ReplayModel, flat_parts

__all__ = ["model_flops_per_step", "action_timeline", "summarize", "relative_error", "Sample", "rank_samples",
           "decompose"]


# ---- measured figures ---------------------------------------------------------------------------
# From the spans every rank recorded to the report's ``measured`` and ``prediction_error``.
#
# - Step time: each rank times its step from the barrier that starts it to the return
#   of ``step()`` (its sends waited); the step's time is the slowest rank's, and the
#   reported figure is the median over timed steps. ``step_starts_s``: rank 0's step
#   starts on the machine's monotonic clock (CPU; None on GPU), to see when each step ran.
# - Busy time: the sum of a rank's compute spans (``timing``); bubble = step - busy.
# - MFU = model FLOPs per step / (step time x ranks x peak FLOP/s) (PaLM appendix B;
#   FLOPs from ``planner.core.layer_math``, the planner's own convention, so measured
#   and predicted MFU share a numerator and a denominator); the peak is a fixed, stated
#   figure (``planner.replay.device``), and without one MFU is None.


def model_flops_per_step(rm: ReplayModel) -> float:
    """Training FLOPs of one step (all microbatches) of the replayed model."""
    tokens = rm.microbatch_size * rm.seq_len * rm.microbatches
    return 3.0 * tokens * sum(layer_forward_flops(l, rm.spec, rm.seq_len) for l in rm.spec.layers)


def action_timeline(plan: Plan, rank: int, spans: list[tuple]) -> list[dict[str, Any]]:
    """The rank's plan actions with measured start, end and busy seconds (spans matched in order)."""
    actions = plan.actions(rank)
    parts = flat_parts(actions)
    got = [(s[0], s[1], s[2]) for s in spans]
    want = [(stage, kind, mb) for _, stage, kind, mb in parts]
    if got != want:
        raise RuntimeError(f"rank {rank} ran {len(got)} compute calls that do not follow the plan "
                           f"(first difference at {next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))})")
    out: list[dict[str, Any]] = [{"action": str(a), "start": None, "end": 0.0, "busy": 0.0} for a in actions]
    for (pos, *_), span in zip(parts, spans):
        entry = out[pos]
        entry["start"] = span[3] if entry["start"] is None else entry["start"]
        entry["end"] = span[4]
        entry["busy"] += span[4] - span[3]
    return out


def relative_error(measured: float | None, predicted: float | None) -> float | None:
    """(measured - predicted) / predicted, or None when either is missing or zero."""
    if measured is None or not predicted:
        return None
    return (measured - predicted) / predicted


def summarize(plan: Plan, rm: ReplayModel, ranks: list[dict[str, Any]], predicted: dict[str, Any],
              *, peak_flops: float | None, peak_label: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(measured, prediction_error, index of the median step) from every rank's records."""
    n = len(ranks[0]["steps"])
    step_times = [max(r["steps"][k]["step_s"] for r in ranks) for k in range(n)]
    step = statistics.median(step_times)
    rep = min(range(n), key=lambda k: abs(step_times[k] - step))
    busy = [statistics.median(sum(s[4] - s[3] for s in r["steps"][k]["spans"]) for k in range(n))
            for r in ranks]
    flops = model_flops_per_step(rm)
    devices = len(ranks)
    measured = {
        "step_time_s": step, "step_times_s": step_times,
        "step_starts_s": [ranks[0]["steps"][k].get("base_s") for k in range(n)],
        "mfu": flops / (step * devices * peak_flops) if peak_flops else None,
        "achieved_flops_per_s": flops / step, "model_flops_per_step": flops,
        "peak_flops_per_device": peak_flops, "peak_flops_source": peak_label,
        "busy_s": busy, "bubble_s": [step - b for b in busy],
        "bubble_fraction": sum(step - b for b in busy) / (devices * step),
        "peak_memory_bytes": [r["memory"]["peak_bytes"] for r in ranks],
        "peak_memory_source": ranks[0]["memory"]["label"],
        "memory_above_baseline_bytes": [r["memory"]["above_baseline_bytes"] for r in ranks],
    }
    pred_step = predicted.get("step_time_s")
    predicted["mfu"] = flops / (pred_step * devices * peak_flops) if pred_step and peak_flops else None
    pred_busy = predicted.get("busy_s") or [None] * devices
    pred_mem = predicted.get("peak_memory_bytes") or [None] * devices
    errors = {
        "step_time": relative_error(step, pred_step),
        "mfu": relative_error(measured["mfu"], predicted["mfu"]),
        "busy_s": [relative_error(m, p) for m, p in zip(busy, pred_busy)],
        "bubble_s": [relative_error(step - m, (pred_step - p) if p is not None and pred_step else None)
                     for m, p in zip(busy, pred_busy)],
        "peak_memory": [relative_error(m, p) for m, p in zip(measured["peak_memory_bytes"], pred_mem)]
        if ranks[0]["memory"]["comparable"] else None,
    }
    return measured, errors, rep


# ---- decomposition ------------------------------------------------------------------------------
# Where a replay's step time differs from the prediction: per rank, term by term.
#
# Both timelines split the same way. For one rank, relative to its own step start:
#
#     step = first start + sum(action durations) + sum(gaps between actions) + tail
#
# (measured: the rank's own ``step_s``; predicted: the simulated step, so the tail is
# the time the rank is idle after its last action). The difference between measured
# and predicted is therefore exactly
#
#     error = d(first start) + d(busy, by action kind) + d(waiting) + d(runtime gaps) + d(tail)
#
# - *busy*: each action measuring longer or shorter than its predicted duration (the
#   sum of its layers' profiled costs): per-action runtime overhead, the loss, cache
#   and contention effects of running many layers back to back;
# - *gaps* before an action, split in two with the ranks' clocks aligned (``base_s``,
#   the machine-wide monotonic clock): *waiting*, while the producer of an input (an
#   action on another rank) was still running, and *after ready*, the rest: the
#   message's latency as the runtime experiences it (send, gloo, receive, wake-up) when
#   the action waited for an input, or the runtime's own Python work between actions
#   when it did not;
# - *first start* and *tail*: step start and end overhead (barrier exit, the final
#   sends waited before ``step()`` returns).
#
# Without aligned clocks (GPU) every gap counts as *after ready*.


Sample = dict[str, Any]
"""One action of one rank in one step: ``kind``, ``stage`` (of its first part), ``dur`` (measured), ``pred`` (predicted
duration), ``gap`` (since the rank's previous action, or the step start), ``wait`` (part of
the gap while a producer on another rank was still running), ``waited`` (whether it
waited for a producer) and ``others_busy`` (mean share of the other ranks computing
while it ran: 0 = it ran alone, 1 = every other rank computed throughout; needs aligned
clocks, else None)."""


def _kind(action: Any) -> str:
    return OVERLAP if len(action.parts) > 1 else action.parts[0].kind


def _cross_deps(sim: SimResult) -> list[list[int]]:
    """Per node, its dependencies on other ranks."""
    rank_of, sentinel = sim.rank_of, len(sim.actions)
    return [[d for d in deps if d != sentinel and rank_of[d] != rank_of[n]]
            for n, deps in enumerate(sim.compiled.deps)]


def rank_samples(sim: SimResult, timelines: list[list[dict[str, Any]]],
                 bases: list[float | None]) -> list[list[Sample]]:
    """Per rank, one ``Sample`` per action, from measured timelines of one step.

    ``timelines[r]`` is ``measure.action_timeline`` of rank r (times from its own step
    start ``bases[r]``); ``sim`` simulates the same schedule (nodes numbered rank by rank)."""
    aligned = all(b is not None for b in bases)
    origin = min(bases) if aligned else 0.0  # type: ignore[type-var]
    shift = [(b - origin) if aligned else 0.0 for b in bases]  # type: ignore[operator]
    end_abs: dict[int, float] = {}
    for r, row in enumerate(sim.compiled.order):
        for n, a in zip(row, timelines[r]):
            end_abs[n] = a["end"] + shift[r]
    cross = _cross_deps(sim)
    spans = [[(a["start"] + shift[r], a["end"] + shift[r]) for a in timelines[r]] for r in range(len(timelines))]
    out: list[list[Sample]] = []
    for r, row in enumerate(sim.compiled.order):
        prev_end, samples = 0.0, []
        for n, a in zip(row, timelines[r]):
            gap = a["start"] - prev_end
            ready = max((end_abs[d] - shift[r] for d in cross[n]), default=float("-inf")) if aligned else float("-inf")
            wait = min(max(0.0, ready - prev_end), max(gap, 0.0))
            samples.append({"kind": _kind(sim.actions[n]), "stage": sim.actions[n].parts[0].stage,
                            "dur": a["end"] - a["start"],
                            "pred": sim.end[n] - sim.start[n], "gap": gap, "wait": wait,
                            "waited": ready > prev_end,
                            "others_busy": _others_busy(spans, r, a["start"] + shift[r], a["end"] + shift[r])
                            if aligned else None})
            prev_end = a["end"]
        out.append(samples)
    return out


def _others_busy(spans: list[list[tuple[float, float]]], rank: int, lo: float, hi: float) -> float:
    """Mean over the other ranks of the share of [lo, hi] they spent in actions."""
    others = [r for r in range(len(spans)) if r != rank]
    if hi <= lo or not others:
        return 0.0
    covered = sum(max(0.0, min(hi, e) - max(lo, s)) for r in others for s, e in spans[r])
    return covered / ((hi - lo) * len(others))


def _predicted_rank(sim: SimResult, r: int) -> dict[str, float]:
    row = sim.compiled.order[r]
    busy = sum(sim.end[n] - sim.start[n] for n in row)
    first = sim.start[row[0]] if row else 0.0
    last = sim.end[row[-1]] if row else 0.0
    return {"first_start_s": first, "busy_s": busy, "gaps_s": last - first - busy,
            "tail_s": sim.step_time - last}


def decompose(sim: SimResult, timelines: list[list[dict[str, Any]]], bases: list[float | None],
              step_s: list[float]) -> list[dict[str, Any]]:
    """Per rank: measured and predicted terms of the step (module docstring) and their differences."""
    out = []
    for r, samples in enumerate(rank_samples(sim, timelines, bases)):
        first = samples[0]["gap"] if samples else 0.0
        last_end = timelines[r][-1]["end"] if timelines[r] else 0.0
        by_kind: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
        for s in samples:
            k = by_kind[s["kind"]]
            k[0], k[1], k[2] = k[0] + 1, k[1] + s["dur"], k[2] + s["pred"]
        later = samples[1:]
        measured = {"first_start_s": first, "busy_s": sum(s["dur"] for s in samples),
                    "waiting_s": sum(s["wait"] for s in later),
                    "after_ready_s": sum(s["gap"] - s["wait"] for s in later),
                    "tail_s": step_s[r] - last_end, "step_s": step_s[r]}
        pred = _predicted_rank(sim, r)
        out.append({
            "rank": r, "measured": measured, "predicted": {**pred, "step_s": sim.step_time},
            "difference_s": {
                "step": step_s[r] - sim.step_time,
                "first_start": first - pred["first_start_s"],
                "busy": measured["busy_s"] - pred["busy_s"],
                "gaps": measured["waiting_s"] + measured["after_ready_s"] - pred["gaps_s"],
                "tail": measured["tail_s"] - pred["tail_s"]},
            "busy_by_kind": {k: {"actions": n, "measured_s": m, "predicted_s": p,
                                 "per_action_excess_s": (m - p) / n}
                             for k, (n, m, p) in sorted(by_kind.items())},
            "after_ready_per_action_s": {
                "waited_for_input": _mean([s["gap"] - s["wait"] for s in later if s["waited"]]),
                "not_waiting": _mean([s["gap"] for s in later if not s["waited"]])},
        })
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None
