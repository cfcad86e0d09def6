"""Local search over the per-rank order for the steady-state period.

Every other candidate (``solvers.schedule.search.candidates``) is built for one step's makespan;
``--objective steady`` only ranked them by their period ([Note: steady state] in
``planner.core.steady``). The period has its own optimum: the wait of the last rank
between its last input-gradient of step k and its first forward of step k + 1 (the last
gradient's way back to rank 0, rank 0's last W, the first forward's way out again)
can be filled only with weight-gradients held back to the end of its step, and every
other rank's wait the same way, while holding them too long delays the next step.

[Note: period search] ``improve_period`` moves one action at a time a few places along
its rank (at most ``REACH``) and keeps the move when the simulated period does not grow
(equal periods too: the period is a maximum over cycles, flat over most moves, and the
plateau leads to the moves that shorten the critical cycle). A move is drawn only when
its rank still runs every same-rank dependency first and stays within its activation
limit (the memory of one step: a rank starts step k + 1 empty); a move that deadlocks
is rejected by the simulator. Draws come from ``random.Random(seed)`` and the search
stops after a number of simulated actions, so the result is reproducible; a wall
deadline ([Note: kept budget] in ``solvers.schedule.search.budget``) can cut it earlier. This
is the local-search reading of Zero Bubble's own search for the post-validation
schedule, which minimises "the largest execution time of all stages" (Qi et al., ICLR
2024, sec. 3.3), here scored by the simulator instead of its ILP.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from planner.core.compiled import DeadlockError
from planner.core.schedule import Action, Schedule, predecessors, provides
from planner.core.stage_costs import StageCosts
from planner.core.steady import steady_state
from solvers.schedule.search.budget import Deadline

__all__ = ["REACH", "SteadySearch", "improve_period"]

REACH = 8
"""Farthest a move carries an action along its rank (positions)."""


@dataclass(frozen=True, kw_only=True)
class SteadySearch:
    """What ``improve_period`` found."""

    schedule: Schedule
    """The best order (the start when nothing better was found)."""
    period_s: float
    """Its steady-state period."""
    start_period_s: float
    """The start's period."""
    moves: int
    """Moves simulated."""
    improved: int
    """Moves that shortened the period."""
    cut: bool
    """The wall deadline stopped the search before its work budget."""


def _local_keys(row: list[Action], costs: StageCosts, rank: int) -> list[set]:
    """Per action: the same-rank units of work it needs (``predecessors`` on this rank)."""
    return [{k for k in predecessors(a, costs.num_stages) if costs.ranks[k[0]] == rank} for a in row]


def _order_ok(row: list[Action], needs: list[set], i: int, j: int) -> bool:
    """Whether moving ``row[i]`` to position ``j`` keeps every same-rank dependency first."""
    a = row[i]
    if j < i:  # passes row[j:i] going back: none of them may be something a needs
        return not any(k in needs[i] for b in row[j:i] for k in provides(b))
    gives = set(provides(a))  # passes row[i+1:j+1] going on: none may need a
    return not any(needs[k] & gives for k in range(i + 1, j + 1))


def _fits(row: list[Action], costs: StageCosts, limit: int | None) -> bool:
    """Activation bytes held on the rank never exceed ``limit`` in this order."""
    if limit is None:
        return True
    held = 0
    for a in row:
        held += costs.allocates(a)
        if held > limit:
            return False
        held -= costs.frees(a)
    return True


def _period(schedule: Schedule, costs: StageCosts, m: int) -> float | None:
    try:
        return steady_state(schedule, costs, m).period_s
    except DeadlockError:
        return None


def improve_period(schedule: Schedule, costs: StageCosts, microbatches: int, *,
                   activation_limit: list[int] | None, work: int, seed: int = 0,
                   deadline: Deadline | None = None) -> SteadySearch:
    """Shorten ``schedule``'s steady-state period by moving actions along their ranks
    ([Note: period search]); ``work`` bounds the simulated actions (moves x actions)."""
    rng = random.Random(seed)
    best = {r: list(row) for r, row in schedule.items()}
    start = period = _period(best, costs, microbatches)
    assert start is not None, "the start schedule is valid"
    size = max(1, sum(len(row) for row in best.values()))
    ranks = [r for r, row in best.items() if len(row) > 1]
    needs = {r: _local_keys(best[r], costs, r) for r in ranks}
    moves = improved = 0
    cut = False
    for _ in range(max(0, work // size)):
        if deadline is not None and deadline.expired():  # each move re-times the whole schedule
            cut = True
            break
        r = rng.choice(ranks)
        row = best[r]
        i = rng.randrange(len(row))
        j = i + rng.choice((-1, 1)) * rng.randint(1, REACH)
        if not 0 <= j < len(row) or not _order_ok(row, needs[r], i, j):
            continue
        new = row[:i] + row[i + 1:]
        new.insert(j, row[i])
        if not _fits(new, costs, None if activation_limit is None else activation_limit[r]):
            continue
        moves += 1
        t = _period({**best, r: new}, costs, microbatches)
        if t is not None and t <= period:
            improved += t < period
            best[r], period = new, t
            needs[r] = _local_keys(new, costs, r)
    return SteadySearch(schedule=best, period_s=period, start_period_s=start, moves=moves,
                        improved=improved, cut=cut)
