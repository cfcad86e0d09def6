"""Shared pieces of the CP-SAT schedule models: integer time, re-timing, solver settings.

CP-SAT works on integers, so seconds are scaled to ticks: one tick is the warm start's
makespan / ``RESOLUTION`` (about 0.002 %), and every duration and P2P delay is rounded
to the nearest tick. A model's solution is only an *order*; it is re-timed with the
exact float costs by ``planner.core.simulate`` before anyone compares or reports it.

[Note: deterministic search] With ``deterministic=True`` (the default) the solver runs
its workers in interleaved batches and stops on its deterministic clock
(``max_deterministic_time`` = the time limit); the same model, seed and limit then give
the same solution whatever the machine load. No wall clock is read unless the caller
passes ``wall_s`` (what is left of the user's ``--time-limit`` cap: [Note: kept budget]
in ``solvers.schedule.search.budget``); only when that fires can two runs differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from planner.core.p2p import crossed_boundary
from planner.core.schedule import OVERLAP, Action, ActionKind, Key, Schedule, predecessors, provides
from planner.core.stage_costs import StageCosts

__all__ = ["RESOLUTION", "Ticks", "Timed", "retime", "configure", "ACCEPTED", "sort_key", "split_b"]

RESOLUTION = 50_000
"""Ticks in the warm start's makespan."""

ACCEPTED = ("OPTIMAL", "FEASIBLE")
"""Solver statuses whose solution is used."""


@dataclass(frozen=True)
class Ticks:
    """Integer durations and delays for one cost set."""

    costs: StageCosts
    """The exact costs."""
    unit: float
    """Seconds per tick."""

    @staticmethod
    def for_makespan(costs: StageCosts, makespan: float) -> "Ticks":
        """Scale so that ``makespan`` is ``RESOLUTION`` ticks."""
        return Ticks(costs, max(makespan, 1e-12) / RESOLUTION)

    def of(self, seconds: float) -> int:
        """Seconds to ticks (nearest)."""
        return int(round(seconds / self.unit))

    def action(self, action: Action) -> int:
        """Ticks the action occupies its rank."""
        return self.of(self.costs.duration(action))

    def delay(self, key: Key, rank: int) -> int:
        """Ticks before ``key``'s result is usable on ``rank`` (P2P when it crosses ranks)."""
        s, kind, _ = key
        if self.costs.ranks[s] == rank:
            return 0
        return self.of(self.costs.p2p_time(crossed_boundary(s, kind)))


def split_b(schedule: Schedule) -> Schedule:
    """Each full backward B as I then W (also inside fused pairs), so every unit has its own task."""
    out: Schedule = {}
    for r, acts in schedule.items():
        row: list[Action] = []
        for a in acts:
            if a.kind == ActionKind.B:
                row += [Action(a.stage, ActionKind.I, a.microbatch), Action(a.stage, ActionKind.W, a.microbatch)]
            elif a.kind == OVERLAP and a.sub[1].kind == ActionKind.B:
                f, b = a.sub
                row += [Action.fused(f, Action(b.stage, ActionKind.I, b.microbatch)),
                        Action(b.stage, ActionKind.W, b.microbatch)]
            else:
                row.append(a)
        out[r] = row
    return out


@dataclass
class Timed:
    """A schedule re-timed in ticks."""

    rows: dict[int, list[tuple[Action, int, int]]]
    """Rank -> (action, start, end) in the rank's order."""
    makespan: int
    """Latest end."""
    topo: list[tuple[int, int]]
    """(rank, position) of every action in a topological order of the timing DAG."""


def retime(schedule: Schedule, ticks: Ticks) -> Timed:
    """Earliest integer start and end of every action in its given order."""
    S = ticks.costs.num_stages
    end: dict[Key, int] = {}
    ptr = {r: 0 for r in schedule}
    free = {r: 0 for r in schedule}
    out: dict[int, list[tuple[Action, int, int]]] = {r: [] for r in schedule}
    topo: list[tuple[int, int]] = []
    progress = True
    while progress:
        progress = False
        for r, acts in schedule.items():
            while ptr[r] < len(acts):
                a = acts[ptr[r]]
                preds = predecessors(a, S)
                if any(k not in end for k in preds):
                    break
                t = max([free[r]] + [end[k] + ticks.delay(k, r) for k in preds])
                e = t + ticks.action(a)
                for k in provides(a):
                    end[k] = e
                topo.append((r, ptr[r]))
                out[r].append((a, t, e))
                free[r] = e
                ptr[r] += 1
                progress = True
    if any(ptr[r] < len(acts) for r, acts in schedule.items()):
        raise ValueError("retime: schedule deadlocks")
    return Timed(out, max(free.values(), default=0), topo)


def sort_key(action: Action, start: int, end: int, num_stages: int) -> tuple[int, int, int]:
    """Order of actions on a rank by start time; ties (zero-length work) in DAG order."""
    p = action.parts[-1]
    level = {ActionKind.F: p.stage, ActionKind.I: 2 * num_stages - p.stage, ActionKind.W: 3 * num_stages - p.stage,
             ActionKind.B: 2 * num_stages - p.stage}[p.kind]
    return (start, end, level)




def configure(solver: cp_model.CpSolver, *, time_limit: float, seed: int, workers: int,
              deterministic: bool = True, wall_s: float | None = None) -> None:
    """Time limit, workers and seed (see [Note: deterministic search]); ``wall_s`` caps the
    wall time further (what is left of the plan's budget: [Note: kept budget] in
    ``solvers.schedule.search.budget``)."""
    prm = solver.parameters
    prm.catch_sigint_signal = False  # Ctrl-C reaches Python: [Note: Ctrl-C] in planner/cli/interrupt.py
    prm.num_workers = max(1, workers)
    prm.random_seed = seed
    if deterministic:
        prm.interleave_search = prm.num_workers > 1
        prm.max_deterministic_time = time_limit
    else:
        prm.max_time_in_seconds = time_limit
    if wall_s is not None:
        prm.max_time_in_seconds = max(0.01, min(prm.max_time_in_seconds, wall_s))
