"""How many microbatches each stage keeps in flight under a given schedule order.

Derived from the schedule itself (count forwards not yet matched by an
input-gradient, in rank order), so it holds for any generator; the partition
solvers use it to bound per-stage activation memory before costs are known.
"""

from __future__ import annotations

from planner.core.schedule import Schedule

__all__ = ["max_in_flight"]


def max_in_flight(schedule: Schedule, num_stages: int) -> list[int]:
    """Per stage, the largest number of microbatches between F and their I (or B)."""
    peak = [0] * num_stages
    for acts in schedule.values():
        held = [0] * num_stages
        for a in acts:
            for p in a.parts:
                if p.kind == "F":
                    held[p.stage] += 1
                    peak[p.stage] = max(peak[p.stage], held[p.stage])
                elif p.kind in ("I", "B"):
                    held[p.stage] -= 1
    return peak
