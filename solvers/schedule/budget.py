"""A wall-clock budget shared by every phase of one plan ([Note: kept budget]).

[Note: kept budget] ``--time-limit S`` bounds the whole ``ppplan plan`` wall time. The
search keeps its reproducible budgets (counts of candidates and rounds, CP-SAT
deterministic time, the window search's work clock), so with the same inputs and seed
it finds the same plan wherever those finish in time. On top, each phase has a wall
deadline, a share of S from the start of the plan (``PHASE_SHARES``): screening,
joint refinement, the CP-SAT polish, the baselines. A phase that reaches its deadline
stops with the best it has and records a *cut*; CP-SAT gets ``max_time_in_seconds``
from what is left. Only a cut can make the plan depend on the machine's speed, so the
plan records whether one happened (``solver.budget``: ``bound`` and the cut phases).
Every phase keeps at least one candidate, so a plan always comes out.

The front door (``planner.api.plan``, hence ``ppplan plan``) starts the budget on entry
(``PlanRequest.started_s``); a library caller of ``make_plan`` that sets neither that nor
a ``budget`` gets the reproducible search alone (no wall deadlines), as before.
"""

from __future__ import annotations

import math
import time

__all__ = ["WallBudget", "Deadline", "PHASE_SHARES", "MAX_TIME_LIMIT_S", "check_time_limit"]

PHASE_SHARES = {"screen": 0.35, "joint": 0.6, "polish": 0.85, "baselines": 0.95}
"""Wall deadline of each phase as a share of the time limit, from the plan's start. What
is left after ``baselines`` pays for validating and writing the plan."""

RESERVE_UNITS = 1.5
"""Evaluations' worth of time kept after every phase for assembling, validating and
writing the plan (its steady-state timing, critical path and JSON scale with its size)."""

MAX_TIME_LIMIT_S = 24 * 3600.0
"""Largest accepted ``--time-limit`` (a day, as the CLI option): beyond it a limit is a typo, not a budget."""


def check_time_limit(seconds: float, field: str = "--time-limit") -> float:
    """``seconds`` if it is a usable time limit, else ``InputError`` naming ``field``."""
    from planner.core.errors import InputError

    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds):
        raise InputError(field, f"must be a finite number of seconds, got {seconds!r}", "e.g. --time-limit 10")
    if not 0 < seconds <= MAX_TIME_LIMIT_S:
        raise InputError(field, f"must be in (0, {MAX_TIME_LIMIT_S:g}] seconds, got {seconds:g}",
                         "e.g. --time-limit 10")
    return float(seconds)


class WallBudget:
    """Wall deadlines per phase, measured from construction (``time.perf_counter``), and
    the phases that hit theirs. ``WallBudget(None)`` never expires (library callers that
    pass no budget get exactly the reproducible search)."""

    def __init__(self, limit_s: float | None, *, start: float | None = None) -> None:
        self.limit_s = limit_s
        """Seconds for the whole plan; None = no wall limit."""
        self.start = time.perf_counter() if start is None else start
        """``perf_counter`` time the budget started."""
        self.cuts: list[str] = []
        """Phases stopped by their wall deadline, in order."""
        self.unit_s = 0.0
        """Seconds one evaluation (simulation + validation) of the plan's schedule took, once
        measured (``measured``): what a late step needs, and the reserve kept for writing
        the plan (every deadline ends ``RESERVE_UNITS`` of these before the limit)."""
        self.ends: dict[str, float] = {}
        """Seconds from the start at which each phase ended (``mark``; recorded under
        ``wall_s`` keys, which comparisons of plans for determinism leave out)."""

    def deadline(self, phase: str) -> float:
        """``perf_counter`` time by which ``phase`` must end (inf without a limit)."""
        if self.limit_s is None:
            return math.inf
        return self.start + min(self.limit_s * PHASE_SHARES.get(phase, 1.0),
                                self.limit_s - RESERVE_UNITS * self.unit_s)

    def left(self, phase: str) -> float:
        """Seconds until ``phase``'s deadline (may be negative; inf without a limit)."""
        return self.deadline(phase) - time.perf_counter()

    def expired(self, phase: str) -> bool:
        """Whether ``phase``'s deadline has passed; records the cut when it has."""
        if self.left(phase) > 0:
            return False
        self.cut(phase)
        return True

    def cap(self, seconds: float, phase: str, *, floor: float = 0.05) -> float:
        """``seconds`` or what is left of ``phase`` (at least ``floor``) if less; records a
        cut when the wall deadline is what binds."""
        left = self.left(phase)
        if left >= seconds:
            return seconds
        self.cut(phase)
        return max(floor, left)

    def measured(self, seconds: float) -> None:
        """Record what one evaluation of the plan's schedule took (``unit_s``)."""
        self.unit_s = max(self.unit_s, seconds)

    def affords(self, phase: str, units: float) -> bool:
        """Whether ``units`` evaluations fit before ``phase``'s deadline; records a cut if not."""
        if self.left(phase) >= units * self.unit_s and self.left(phase) > 0:
            return True
        self.cut(phase)
        return False

    def phase(self, phase: str) -> "Deadline":
        """The deadline of ``phase``, to hand to a solver."""
        return Deadline(self, phase)

    def mark(self, phase: str) -> None:
        """Record that ``phase`` ended now."""
        self.ends[phase] = round(time.perf_counter() - self.start, 4)

    def cut(self, phase: str) -> None:
        """Record that ``phase`` was stopped by the wall clock."""
        if phase not in self.cuts:
            self.cuts.append(phase)

    @property
    def bound(self) -> bool:
        """Whether any phase was cut (the plan may then depend on the machine's speed)."""
        return bool(self.cuts)

    def record(self) -> dict:
        """What the plan's ``solver.budget`` says."""
        return {"time_limit_s": self.limit_s, "bound": self.bound, "cut_phases": list(self.cuts),
                "phase_ends": {k: {"wall_s": v} for k, v in self.ends.items()},
                "wall_s": time.perf_counter() - self.start}


class Deadline:
    """One phase's wall deadline (``WallBudget.phase``): what solvers take as ``deadline``."""

    def __init__(self, budget: WallBudget, phase: str) -> None:
        self.budget = budget
        self.name = phase

    @property
    def at(self) -> float:
        """``perf_counter`` time of the deadline (inf without a limit)."""
        return self.budget.deadline(self.name)

    def left(self) -> float:
        """Seconds left (may be negative)."""
        return self.budget.left(self.name)

    def expired(self) -> bool:
        """Whether the deadline has passed (recorded as a cut of the phase)."""
        return self.budget.expired(self.name)

    def cap(self, seconds: float, *, floor: float = 0.05) -> float:
        """``seconds`` or what is left if less (recorded as a cut)."""
        return self.budget.cap(seconds, self.name, floor=floor)

    def cut(self) -> None:
        """Record that the phase was stopped by the wall clock."""
        self.budget.cut(self.name)

    def affords(self, units: float) -> bool:
        """Whether ``units`` evaluations of the plan's schedule fit before the deadline."""
        return self.budget.affords(self.name, units)
