"""From the spans every rank recorded to the report's ``measured`` and ``prediction_error``.

- Step time: each rank times its step from the barrier that starts it to the return
  of ``step()`` (its sends waited); the step's time is the slowest rank's, and the
  reported figure is the median over timed steps. ``step_starts_s``: rank 0's step
  starts on the machine's monotonic clock (CPU; None on GPU), to see when each step ran.
- Busy time: the sum of a rank's compute spans (``timing``); bubble = step - busy.
- MFU = model FLOPs per step / (step time x ranks x peak FLOP/s) (PaLM appendix B;
  FLOPs from ``planner.core.layer_math``, the planner's own convention, so measured
  and predicted MFU share a numerator and a denominator); the peak is a fixed, stated
  figure (``planner.replay.peak``), and without one MFU is None.
"""

from __future__ import annotations

import statistics
from typing import Any

from planner.core.layer_math import layer_forward_flops
from planner.core.plan import Plan
from planner.replay.lowering import flat_parts
from planner.replay.model import ReplayModel

__all__ = ["model_flops_per_step", "action_timeline", "summarize", "relative_error"]


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
