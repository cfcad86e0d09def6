"""Plan -> Chrome / Perfetto trace JSON of the predicted timeline.

Trace Event Format (the JSON ``chrome://tracing`` and ui.perfetto.dev open): one
complete event (``ph: "X"``, microseconds) per action from ``planner.core.simulate``,
one thread per pipeline rank, and one counter track (``ph: "C"``) per rank with its
predicted memory (static + activations held) in GiB.
"""

from __future__ import annotations

from typing import Any

from planner.core.plan import Plan
from planner.core.schedule import OVERLAP, ActionKind
from planner.core.simulate import SimResult, simulate

__all__ = ["trace_events", "chrome_trace"]

_US = 1e6
_CATEGORY = {ActionKind.F: "forward", ActionKind.I: "input-grad", ActionKind.W: "weight-grad",
             ActionKind.B: "backward", OVERLAP: "overlap"}


def trace_events(plan: Plan, sim: SimResult) -> list[dict[str, Any]]:
    """Trace events of a simulated plan: metadata, one X event per action, memory counters."""
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"ppplan {plan.model.name}"}}]
    for r in range(len(sim.compiled.order)):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r, "args": {"name": f"rank {r}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": r, "args": {"sort_index": r}})
    for n, a in enumerate(sim.actions):
        args: dict[str, Any] = {"stage": a.stage, "microbatch": a.microbatch}
        if a.kind == OVERLAP:
            args["parts"] = [str(p) for p in a.parts]
        events.append({"name": str(a), "cat": _CATEGORY[a.kind], "ph": "X", "pid": 0,
                       "tid": sim.rank_of[n], "ts": sim.start[n] * _US,
                       "dur": (sim.end[n] - sim.start[n]) * _US, "args": args})
    static = plan.parsed_stage_costs().static_per_rank()
    for r, trace in enumerate(sim.memory):
        base = static[r] if r < len(static) else 0
        for t, held in trace:
            events.append({"name": f"memory rank {r}", "ph": "C", "pid": 0, "ts": t * _US,
                           "args": {"GiB": round((base + held) / 2**30, 4)}})
    return events


def chrome_trace(plan: Plan, sim: SimResult | None = None) -> dict[str, Any]:
    """The whole trace document; simulates the plan when ``sim`` is not given."""
    if sim is None:
        sim = simulate(plan.parsed_schedule(), plan.parsed_stage_costs())
    return {"traceEvents": trace_events(plan, sim), "displayTimeUnit": "ms",
            "otherData": {"model": plan.model.name, "step_time_s": sim.step_time,
                          "bubble_fraction": sim.bubble_fraction,
                          "schedule": plan.solver.schedule or plan.solver.name}}
