"""Deadlines for tasks (usually W): parse ``--deadline``, check they can be met at all.

By default every W only has to finish before the optimizer step (the end of the
step). A user may also pin a task: ``--deadline 0W3=0.8`` (W of stage 0, microbatch 3,
must end 0.8 s into the step) or ``--deadline W=1.5`` (every W). The earliest a task can
finish in any schedule is the longest dependency chain ending in it with each task at
its cheapest duration (``solvers.schedule.search.lower_bound``'s chain durations) and P2P between
ranks; a deadline before that is reported with the task and the number.
"""

from __future__ import annotations

import math

from planner.core.errors import InfeasibleError, InputError
from planner.core.p2p import crossed_boundary
from planner.core.schedule import Action, ActionKind, Key, parse_action, predecessors
from planner.core.stage_costs import StageCosts

__all__ = ["parse_deadlines", "earliest_finish", "check_deadlines"]


def parse_deadlines(items: list[str] | tuple[str, ...], *, num_stages: int, microbatches: int,
                    field: str = "--deadline") -> dict[Key, float]:
    """``TASK=SECONDS`` items (TASK like ``0W3``, or ``W`` for all W) to a deadline per task."""
    out: dict[Key, float] = {}
    for item in items:
        task, _, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            raise InputError(field, f"{item!r}: expected TASK=SECONDS", "e.g. 0W3=0.8 or W=1.5") from None
        if not math.isfinite(seconds):
            raise InputError(field, f"{item!r}: deadline must be a finite number of seconds", "e.g. 0W3=0.8")
        if seconds <= 0:
            raise InputError(field, f"{item!r}: deadline must be positive", "give seconds > 0")
        if task.strip() == ActionKind.W:
            out.update({(s, ActionKind.W, m): seconds for s in range(num_stages) for m in range(microbatches)})
            continue
        try:
            a = parse_action(task)
        except ValueError:
            raise InputError(field, f"{item!r}: {task!r} is not a task", "e.g. 0W3=0.8 or W=1.5") from None
        if a.kind not in (ActionKind.F, ActionKind.I, ActionKind.W) or a.stage >= num_stages or \
                a.microbatch >= microbatches:
            raise InputError(field, f"{item!r}: no such task", f"stages 0..{num_stages - 1}, "
                             f"microbatches 0..{microbatches - 1}, kinds F, I, W")
        out[(a.stage, a.kind, a.microbatch)] = seconds
    return out


def earliest_finish(costs: StageCosts, key: Key) -> float:
    """Longest chain of cheapest durations (plus P2P) that ends with ``key``."""
    memo: dict[Key, float] = {}
    cheapest = {ActionKind.F: list(costs.f), ActionKind.I: list(costs.i), ActionKind.W: list(costs.w)}
    for (a, b), t in costs.fused.items():
        cheapest[ActionKind.F][a] = min(cheapest[ActionKind.F][a], t)
        cheapest[ActionKind.I][b] = min(cheapest[ActionKind.I][b], t)

    def finish(k: Key) -> float:
        if k not in memo:
            s, kind, m = k
            start = 0.0
            for p in predecessors(Action(s, kind, m), costs.num_stages):
                hop = 0.0
                if costs.ranks[p[0]] != costs.ranks[s]:
                    hop = costs.p2p_time(crossed_boundary(p[0], p[1]))
                start = max(start, finish(p) + hop)
            memo[k] = start + cheapest[kind][s]
        return memo[k]

    return finish(key)


def check_deadlines(costs: StageCosts, deadlines: dict[Key, float]) -> None:
    """Raise ``InfeasibleError`` naming the first task whose deadline precedes its earliest finish."""
    for key in sorted(deadlines):
        early = earliest_finish(costs, key)
        if deadlines[key] < early - 1e-12:
            raise InfeasibleError(
                f"deadline of task {key[0]}{key[1]}{key[2]} is {deadlines[key]:.6g} s but it cannot "
                f"finish before {early:.6g} s (its dependency chain); relax --deadline")
