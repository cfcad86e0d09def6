"""The work meter: how many actions the simulator has timed for one plan.

[Note: timed actions] A count, not a clock: the planner's phases bound their re-timings
with it ([Note: work budget] in ``solvers.schedule.search.budget``), so where they stop
depends on the inputs alone, never on the machine's speed or load. Each plan's budget
owns one meter and hands it down the call chain; ``simulate``, ``simulate_compiled`` and
``validate`` add what they time to the meter they are given. No process-wide count: two
plans in one process (or in two threads) count independently.
"""

from __future__ import annotations

__all__ = ["WorkMeter"]


class WorkMeter:
    """Actions timed so far by the simulations charged to it."""

    __slots__ = ("count", "__weakref__")

    def __init__(self) -> None:
        self.count: int = 0
        """Actions timed so far."""

    def add(self, n: int) -> None:
        """Charge ``n`` timed actions."""
        self.count += n
