"""Search budgets: a deterministic work budget, and an optional wall-clock safety cap.

[Note: work budget] ``--work W`` (default ``DEFAULT_WORK``) is the search effort in
*reference seconds*: about W seconds on an idle 2-core machine, but counted in work, not
read off a clock. Every phase spends a share of it in units that do not depend on the
machine's speed or load: CP-SAT's deterministic time (``max_deterministic_time``, one
worker or interleaved workers), the window search's work clock (variables built plus
deterministic time), counted candidates, rounds and moves, the period search's simulated
actions, and the phases' re-timings (the budget's ``WorkMeter``, which the planner hands
to every simulation it runs: each phase stops, keeping what it has, once the actions timed
since the plan began pass its share ``PHASE_SHARES`` of ``W x ACTIONS_PER_WORK_S``; [Note:
timed actions] in ``planner.core.meter``). So the same
inputs, seed and W give the same plan (partition, schedule,
predictions), byte for byte except ``wall_s`` fields, on an idle or a loaded machine.

[Note: kept budget] ``--time-limit S`` (default: none) is a wall-clock safety cap on top.
Each phase then has a wall deadline, a share of S from the start of the plan
(``PHASE_SHARES``): screening, joint refinement, the CP-SAT polish, the baselines. A phase
that reaches its deadline stops with the best it has and records a *cut*; CP-SAT gets
``max_time_in_seconds`` from what is left. Only a cut can make the plan depend on the
machine, so the plan records whether one happened (``solver.budget``: ``bound`` and the
cut phases) and the summary's first line says so. Every phase keeps at least one
candidate, so a cut never turns into a claim of infeasibility: when no candidate was
found before the cap, ``BudgetExhausted`` says so (not proven infeasible).

The front door (``planner.api.plan``, hence ``ppplan plan``) starts the wall clock on
entry (``PlanRequest.started_s``) when a cap is given.
"""

from __future__ import annotations

import math
import time

from planner.core.meter import WorkMeter

__all__ = ["WallBudget", "Deadline", "meter_of", "PHASE_SHARES", "MAX_TIME_LIMIT_S", "check_time_limit", "DEFAULT_WORK",
           "check_work", "ACTIONS_PER_WORK_S"]

DEFAULT_WORK = 10.0
"""Default ``--work``: reference seconds of search ([Note: work budget]); the default plan
then takes about as long as it did when this was a 10 s wall limit on an idle 2-core machine."""

PHASE_SHARES = {"screen": 0.35, "joint": 0.6, "polish": 0.85, "baselines": 0.95}
"""Wall deadline of each phase as a share of the time limit, from the plan's start. What
is left after ``baselines`` pays for validating and writing the plan."""

RESERVE_UNITS = 1.5
"""Evaluations' worth of time kept after every phase for assembling, validating and
writing the plan (its steady-state timing, critical path and JSON scale with its size)."""

MAX_TIME_LIMIT_S = 24 * 3600.0
"""Largest accepted ``--time-limit`` (a day, as the CLI option): beyond it a limit is a typo, not a budget."""


def check_work(work: float, field: str = "--work") -> float:
    """``work`` if it is a usable work budget (reference seconds), else ``InputError``."""
    return check_time_limit(work, field, example="e.g. --work 10")


def check_time_limit(seconds: float, field: str = "--time-limit", *, example: str = "e.g. --time-limit 10") -> float:
    """``seconds`` if it is a usable time limit, else ``InputError`` naming ``field``."""
    from planner.core.errors import InputError

    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds):
        raise InputError(field, f"must be a finite number of seconds, got {seconds!r}", example)
    if not 0 < seconds <= MAX_TIME_LIMIT_S:
        raise InputError(field, f"must be in (0, {MAX_TIME_LIMIT_S:g}] seconds, got {seconds:g}", example)
    return float(seconds)


ACTIONS_PER_WORK_S = 100_000
"""Actions the phases may re-time per reference second of ``--work`` ([Note: work budget]):
about what the 2-core reference machine times in a second of planning. Of ``DEFAULT_WORK``'s
1 M, the default plans of the shipped models time 0.13-0.41 M actions, DeepSeek-V3's 0.89 M
(its joint refinement and polish stop at their shares; the plan is the one a 10 s wall
limit gave); a plan of thousands of microbatches (``--gpus 1024`` on DeepSeek-V3: pp 32,
960 microbatches, 0.5 M actions per screened candidate) stops its phases by this count."""


class WallBudget:
    """Phase budgets: wall deadlines measured from construction (``time.perf_counter``),
    when a limit is given, and the work count (``work_actions``: re-timed actions, [Note:
    work budget]), when one is given; the phases that hit either. ``WallBudget(None)``
    never expires (library callers that pass no budget get the counted search alone)."""

    def __init__(self, wall_cap_s: float | None, *, start: float | None = None,
                 work_actions: float | None = None) -> None:
        self.wall_cap_s = wall_cap_s
        """Seconds for the whole plan; None = no wall limit."""
        self.work_actions = work_actions
        """Actions the plan's phases may re-time together; None = uncounted."""
        self.meter = WorkMeter()
        """This plan's timed actions: every simulation of the plan is charged to it
        ([Note: timed actions] in ``planner.core.meter``)."""
        self.work_cuts: list[str] = []
        """Phases stopped by their share of the work count (deterministic), in order."""
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
        if self.wall_cap_s is None:
            return math.inf
        return self.start + min(self.wall_cap_s * PHASE_SHARES.get(phase, 1.0),
                                self.wall_cap_s - RESERVE_UNITS * self.unit_s)

    def left(self, phase: str) -> float:
        """Seconds until ``phase``'s deadline (may be negative; inf without a limit)."""
        return self.deadline(phase) - time.perf_counter()

    def spent(self) -> int:
        """Actions re-timed since the budget started ([Note: timed actions])."""
        return self.meter.count

    def worked_out(self, phase: str) -> bool:
        """Whether ``phase``'s share of the work count is spent; records the work cut."""
        if self.work_actions is None or self.spent() < self.work_actions * PHASE_SHARES.get(phase, 1.0):
            return False
        if phase not in self.work_cuts:
            self.work_cuts.append(phase)
        return True

    def expired(self, phase: str) -> bool:
        """Whether ``phase``'s deadline has passed or its work is spent; records the cut."""
        if self.worked_out(phase):
            return True
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
        """Whether ``units`` evaluations fit before ``phase``'s deadline, with work left; records a cut if not."""
        if self.worked_out(phase):
            return False
        if self.left(phase) >= units * self.unit_s and self.left(phase) > 0:
            return True
        self.cut(phase)
        return False

    def wall_affords(self, phase: str, units: float) -> bool:
        """Whether ``units`` evaluations fit before ``phase``'s wall deadline, whatever the work
        count says (for work bounded by count, such as the baselines); records a cut if not."""
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
        return {"time_limit_s": self.wall_cap_s, "bound": self.bound, "cut_phases": list(self.cuts),
                "work_actions": self.work_actions, "timed_actions": self.spent(),
                "work_cut_phases": list(self.work_cuts),
                "phase_ends": {k: {"wall_s": v} for k, v in self.ends.items()},
                "wall_s": time.perf_counter() - self.start}


class Deadline:
    """One phase's wall deadline (``WallBudget.phase``): what solvers take as ``deadline``."""

    def __init__(self, budget: WallBudget, phase: str) -> None:
        self.budget = budget
        self.name = phase

    @property
    def meter(self) -> WorkMeter:
        """The budget's work meter, which the phase's simulations are charged to."""
        return self.budget.meter

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

    def wall_affords(self, units: float) -> bool:
        """Whether ``units`` evaluations fit before the wall deadline (the work count aside)."""
        return self.budget.wall_affords(self.name, units)


def meter_of(deadline: Deadline | None) -> WorkMeter | None:
    """The work meter of ``deadline``'s budget; None without one (the simulations go uncounted)."""
    return None if deadline is None else deadline.meter
