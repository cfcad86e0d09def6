"""Where a replay's step time differs from the prediction: per rank, term by term.

Both timelines split the same way. For one rank, relative to its own step start:

    step = first start + sum(action durations) + sum(gaps between actions) + tail

(measured: the rank's own ``step_s``; predicted: the simulated step, so the tail is
the time the rank is idle after its last action). The difference between measured
and predicted is therefore exactly

    error = d(first start) + d(busy, by action kind) + d(waiting) + d(runtime gaps) + d(tail)

- *busy*: each action measuring longer or shorter than its predicted duration (the
  sum of its layers' profiled costs): per-action runtime overhead, the loss, cache
  and contention effects of running many layers back to back;
- *gaps* before an action, split in two with the ranks' clocks aligned (``base_s``,
  the machine-wide monotonic clock): *waiting*, while the producer of an input (an
  action on another rank) was still running, and *after ready*, the rest: the
  message's latency as the runtime experiences it (send, gloo, receive, wake-up) when
  the action waited for an input, or the runtime's own Python work between actions
  when it did not;
- *first start* and *tail*: step start and end overhead (barrier exit, the final
  sends waited before ``step()`` returns).

Without aligned clocks (GPU) every gap counts as *after ready*.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from planner.core.schedule import OVERLAP
from planner.core.simulate import SimResult

__all__ = ["Sample", "rank_samples", "decompose"]

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
