"""Joint refinement of one (partition, schedule) pair: alternate until neither improves.

A partition that is best under 1F1B is not always best once W tasks move into bubbles
or F&B pairs are fused, and the best order depends on the partition. Starting from a
screened candidate, each round

1. re-chooses the order for the current partition's stage costs from every heuristic
   family, W-filled and greedy (``solvers.schedule.search.search.best_schedule`` without CP-SAT);
2. moves stage boundaries under that order, scoring by the simulator
   (``solvers.partition.refine.refine_partition``: the exposed part of each stage under
   *this* schedule, which is the schedule-aware stage cost);

and stops when a round moves no boundary (the next would choose the same order again),
when it improves neither, or after ``max_rounds``. Both steps keep
the incumbent unless strictly faster, so the step time never increases, and both are
deterministic, so the result depends only on the inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.core.costs import CostTable
from planner.core.errors import InfeasibleError
from planner.core.meter import WorkMeter
from planner.core.placement import Bounds
from planner.core.schedule import Key, Schedule
from planner.core.simulate import simulate
from planner.core.stage_costs import stage_costs
from planner.core.steady import steady_state
from solvers.partition.refine import refine_partition
from solvers.schedule.search.budget import Deadline
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.schedule.search.search import best_schedule

__all__ = ["JointResult", "alternate"]


ROUND_UNITS = 3
"""Evaluations' worth of time (``WallBudget.unit_s``) a round needs to start before a
deadline: the order's re-choice validates, the boundary moves simulate."""


@dataclass
class JointResult:
    """Where ``alternate`` ended."""

    bounds: Bounds
    """Final partition."""
    name: str
    """Final schedule's name (family and passes)."""
    schedule: Schedule
    """Final schedule."""
    step_time: float
    """Its simulated step time."""
    score: float
    """What the objective minimises: ``step_time``, or the steady-state period."""
    history: list[dict] = field(default_factory=list)
    """One entry per round: schedule chosen, boundary moves, step time after the round."""
    settled: bool = False
    """Whether the schedule was chosen among every heuristic for the final partition (the
    last round moved no boundary), so re-running the heuristics would find it again."""
    improved: bool = False
    """Whether the result beats the start by the objective."""


def _score(table: CostTable, bounds: Bounds, ranks: list[int], sched: Schedule, m: int, objective: str,
           meter: WorkMeter | None) -> float:
    """The objective's time of ``sched`` on ``bounds``: makespan or steady-state period."""
    costs = stage_costs(table, bounds, ranks)
    return steady_state(sched, costs, m).period_s if objective == "steady" else \
        simulate(sched, costs, meter=meter).step_time


def alternate(table: CostTable, bounds: Bounds, ranks: list[int], start: tuple[str, Schedule], *,
              microbatches: int, memory_limit: MemoryLimit | None,
              deadlines: dict[Key, float] | None = None, pinned: frozenset[int] = frozenset(),
              max_rounds: int = 3, seed: int = 0, deadline: Deadline | None = None,
              objective: str = "makespan", meter: WorkMeter | None = None) -> JointResult:
    """Alternate schedule choice and boundary moves from ``start`` (see module doc); a
    round does not start, and its steps stop early, at ``deadline`` ([Note: kept budget]
    in ``solvers.schedule.search.budget``), keeping the best found so far. The order is chosen
    and kept by ``objective`` (makespan or steady period); a boundary move, scored by
    makespan, is kept only when it also improves the objective; moves keep within
    ``memory_limit`` as the validator checks it (``MemoryLimit.fits``). Every simulation
    is charged to ``meter`` (the plan's ``WorkMeter``)."""
    name, sched = start
    step = simulate(sched, stage_costs(table, bounds, ranks), meter=meter).step_time
    first = step if objective != "steady" else _score(table, bounds, ranks, sched, microbatches, objective, meter)
    res = JointResult(list(bounds), name, sched, step, first)
    for k in range(max_rounds):
        if deadline is not None and not deadline.affords(ROUND_UNITS):
            break
        before = res.score
        try:
            choice = best_schedule(stage_costs(table, res.bounds, ranks), microbatches=microbatches,
                                   memory_limit=memory_limit, deadlines=deadlines, method="auto",
                                   seed=seed, start=(res.name, res.schedule), polish=False,
                                   deadline=deadline, objective=objective, meter=meter)
        except InfeasibleError:
            break
        score = _score(table, res.bounds, ranks, choice.schedule, microbatches, objective, meter) \
            if objective == "steady" else choice.step_time
        if score < res.score * (1 - 1e-9):
            res.name, res.schedule, res.step_time, res.score = choice.name, choice.schedule, choice.step_time, score
        moved = refine_partition(table, res.schedule, res.bounds, ranks,
                                 fits=None if memory_limit is None else memory_limit.fits,
                                 pinned=pinned, max_rounds=16,
                                 deadline=None if deadline is None else deadline.at, meter=meter)
        moved_score = moved.step_time if objective != "steady" or moved.bounds == res.bounds else \
            _score(table, moved.bounds, ranks, res.schedule, microbatches, objective, meter)
        gain = moved.step_time < res.step_time * (1 - 1e-9) and moved_score < res.score * (1 - 1e-9)
        if deadline is not None and deadline.expired():
            res.settled = False
            if gain:
                res.bounds, res.step_time, res.score = moved.bounds, moved.step_time, moved_score
            break
        res.settled = not gain
        if gain:
            res.bounds, res.step_time, res.score = moved.bounds, moved.step_time, moved_score
        res.history.append({"round": k + 1, "schedule": res.name, "boundary_moves": moved.rounds,
                            "step_time_s": res.step_time})
        if res.settled or res.score >= before * (1 - 1e-9):
            break  # settled: the next round would choose among the same candidates again
    res.improved = res.score < first * (1 - 1e-9)
    return res
