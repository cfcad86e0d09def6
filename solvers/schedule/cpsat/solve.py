"""CP-SAT front: improve a warm-start schedule, whole-model or by windows.

Up to ``FULL_MODEL_TASKS`` tasks the whole model of ``solvers.schedule.cpsat.model`` is
solved (fused F&B pairs chosen by the solver when the costs make them cheaper);
beyond that ``solvers.schedule.cpsat.lns`` re-optimises windows of the warm start. Either way
the answer is re-timed by the simulator, checked by the validator (memory per rank,
deadlines) and only kept when it is faster than the warm start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from planner.core.meter import WorkMeter
from planner.core.schedule import Key, Schedule
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from solvers.schedule.cpsat.lns import lns_improve
from solvers.schedule.cpsat.model import ScheduleData, build_model, extract_schedule, solve_model

__all__ = ["FULL_MODEL_TASKS", "WALL_PER_DET", "CpsatOutcome", "cpsat_improve", "default_workers"]

FULL_MODEL_TASKS = 400
"""Largest task count (3 x stages x microbatches) solved as one model."""
WALL_PER_DET = 2.5
"""Wall seconds per CP-SAT deterministic second on whole-schedule models, on the 2-core
reference machine (measured 2.1-3.1 on Qwen3-Next pp 4, 64 microbatches). ``time_limit``
is in wall-like seconds, so the solver gets ``time_limit / WALL_PER_DET`` deterministic
seconds: reproducible like the deterministic clock, about ``time_limit`` on such a machine.
The window search counts its budget the same way (``solvers.schedule.cpsat.lns``, [Note: work clock])."""


def default_workers() -> int:
    """CP-SAT workers: one, on every machine. A count from the machine's cores would make
    plans differ between machines (interleaved search is reproducible only for a fixed
    worker count), and on a busy 2-core machine two interleaved workers overshoot their
    deterministic limit about twofold; callers who want more pass ``workers``."""
    return 1


@dataclass(frozen=True, kw_only=True)
class CpsatOutcome:
    """What the solver returned."""

    schedule: Schedule | None
    """Solution re-ordered per rank; None when it found nothing (the warm start stands)."""
    status: str
    """OPTIMAL (whole model, within microbatch-ordered schedules), FEASIBLE or UNKNOWN."""
    method: str
    """cpsat (whole model) or cpsat-lns (windows)."""
    wall_s: float
    """Seconds spent."""


def cpsat_improve(costs: StageCosts, microbatches: int, hint: Schedule, *,
                  activation_limit: list[int | None] | None, deadlines: dict[Key, float],
                  time_limit: float, seed: int, workers: int | None = None,
                  fuse: bool = False, wall_s: float | None = None, meter: WorkMeter | None = None) -> CpsatOutcome:
    """Search for a schedule better than ``hint`` within about ``time_limit`` seconds on the
    reference machine (a reproducible budget: ``WALL_PER_DET``) and at most ``wall_s``
    wall seconds (None: no wall cap beyond the safety cap). Its simulations are charged to ``meter``."""
    t0 = time.perf_counter()
    if 3 * costs.num_stages * microbatches <= FULL_MODEL_TASKS:
        sm = build_model(ScheduleData(costs=costs, microbatches=microbatches, hint=hint,
                                      activation_limit=activation_limit, deadlines=deadlines, fuse=fuse),
                         meter=meter)
        res = solve_model(sm, time_limit=time_limit / WALL_PER_DET, seed=seed,
                          workers=workers or default_workers(), wall_s=wall_s)
        return CpsatOutcome(schedule=extract_schedule(sm, res), status=res.status, method="cpsat",
                            wall_s=time.perf_counter() - t0)
    lns = lns_improve(costs, hint, activation_limit=activation_limit, deadlines=deadlines,
                      time_limit=time_limit, seed=seed, wall_s=wall_s, meter=meter)
    better = lns.step_time < simulate(hint, costs, meter=meter).step_time
    return CpsatOutcome(schedule=lns.schedule if better else None, status="FEASIBLE",
                        method="cpsat-lns", wall_s=time.perf_counter() - t0)
