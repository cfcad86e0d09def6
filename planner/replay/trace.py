"""Chrome / Perfetto trace of a replay: the measured timeline beside the predicted one.

Two process rows, ``measured`` (pid 0) and ``predicted`` (pid 1), one thread row per
pipeline rank; each action is a complete event (``ph: X``, microseconds) named by its
text form (``2F0``, ``(0F3;1I1)OVERLAP_F_B``). Open in chrome://tracing or
ui.perfetto.dev. Format: the Trace Event Format (Google, "Trace Event Format" doc).
"""

from __future__ import annotations

from typing import Any

from planner.core.schedule import OVERLAP
from planner.core.simulate import SimResult

__all__ = ["chrome_trace"]

_US = 1e6


def _meta(pid: int, name: str, ranks: int) -> list[dict[str, Any]]:
    out = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}},
           {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}}]
    out += [{"ph": "M", "pid": pid, "tid": r, "name": "thread_name", "args": {"name": f"rank {r}"}}
            for r in range(ranks)]
    return out


def _event(pid: int, rank: int, name: str, start: float, end: float, **args: Any) -> dict[str, Any]:
    kind = OVERLAP if name.endswith(OVERLAP) else name.rstrip("0123456789")[-1]
    return {"ph": "X", "pid": pid, "tid": rank, "name": name, "cat": kind,
            "ts": start * _US, "dur": max(end - start, 0.0) * _US, "args": args}


def chrome_trace(measured: list[list[dict[str, Any]]], sim: SimResult, *,
                 predicted_label: str) -> dict[str, Any]:
    """Trace JSON from per-rank measured actions (``measure.action_timeline``) and a simulation."""
    ranks = len(measured)
    events = _meta(0, "measured", ranks) + _meta(1, f"predicted ({predicted_label})", ranks)
    for rank, actions in enumerate(measured):
        for a in actions:
            events.append(_event(0, rank, a["action"], a["start"], a["end"], busy_s=a["busy"]))
    for n, action in enumerate(sim.actions):
        events.append(_event(1, sim.rank_of[n], str(action), sim.start[n], sim.end[n]))
    return {"traceEvents": events, "displayTimeUnit": "ms"}
