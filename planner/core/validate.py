"""Validate a schedule: a pure function returning the violations it finds.

Checks, in order (later checks only run when earlier ones pass, since they rely on them):
1. each action's stage is placed on the rank that runs it, indices are in range;
2. every (stage, microbatch) has exactly one F and one input-gradient and one
   weight-gradient (I + W, or B which does both, or inside a fused action);
3. within a rank, an action's same-rank predecessors come earlier;
4. the ranks can make progress together (no deadlock of sends and receives);
5. every W finishes before the optimizer step and before its deadline, if any;
6. peak memory per rank (static + activations) is within the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.core.schedule import ActionKind, Key, Schedule, predecessors, provides, schedule_to_text
from planner.core.compiled import compile_sound
from planner.core.meter import WorkMeter
from planner.core.simulate import DeadlockError, SimResult, simulate, simulate_compiled
from planner.core.stage_costs import StageCosts
from planner.core.units import format_bytes

__all__ = ["Violation", "validate", "render_violation"]


@dataclass(frozen=True)
class Violation:
    """One problem, located at (rank, position) when it has a place in the schedule."""

    message: str
    """What is wrong, in one line."""
    rank: int | None = None
    """Rank whose list holds the faulty action."""
    position: int | None = None
    """Index in that rank's list."""
    action: str | None = None
    """The faulty action's text."""

    def __str__(self) -> str:
        if self.rank is None or self.position is None:
            return self.message
        return f"rank {self.rank}, position {self.position} ({self.action}): {self.message}"


def render_violation(v: Violation, schedule: Schedule, *, context: int = 4) -> str:
    """The violation plus the rank x step grid around it, the faulty cell marked >x<."""
    if v.rank is None or v.position is None:
        return str(v)
    lo = max(0, v.position - context)
    hi = min(max(len(a) for a in schedule.values()), v.position + context + 1)
    return f"{v}\n{schedule_to_text(schedule, mark=(v.rank, v.position), window=(lo, hi))}"


def _check_placement(schedule: Schedule, costs: StageCosts, m: int) -> list[Violation]:
    out = []
    for r, acts in sorted(schedule.items()):
        for pos, a in enumerate(acts):
            for p in a.parts:
                if not 0 <= p.stage < costs.num_stages:
                    out.append(Violation(f"stage {p.stage} does not exist (0..{costs.num_stages - 1})",
                                         r, pos, str(a)))
                elif costs.ranks[p.stage] != r:
                    out.append(Violation(f"stage {p.stage} is placed on rank {costs.ranks[p.stage]}",
                                         r, pos, str(a)))
                elif not 0 <= p.microbatch < m:
                    out.append(Violation(f"microbatch {p.microbatch} out of range 0..{m - 1}",
                                         r, pos, str(a)))
    return out


def _check_coverage(schedule: Schedule, costs: StageCosts, m: int) -> list[Violation]:
    seen: dict[Key, tuple[int, int]] = {}
    out = []
    for r, acts in sorted(schedule.items()):
        for pos, a in enumerate(acts):
            for key in provides(a):
                if key in seen:
                    pr, pp = seen[key]
                    out.append(Violation(f"{key[0]}{key[1]}{key[2]} already done at rank {pr}, "
                                         f"position {pp}", r, pos, str(a)))
                else:
                    seen[key] = (r, pos)
    for s in range(costs.num_stages):
        for mb in range(m):
            for kind in (ActionKind.F, ActionKind.I, ActionKind.W):
                if (s, kind, mb) not in seen:
                    out.append(Violation(f"{s}{kind}{mb} is never run (rank {costs.ranks[s]} should run it)"))
    return out


def _check_rank_order(schedule: Schedule, costs: StageCosts) -> list[Violation]:
    out = []
    for r, acts in sorted(schedule.items()):
        done: set[Key] = set()
        local = {k for a in acts for k in provides(a)}
        for pos, a in enumerate(acts):
            for key in predecessors(a, costs.num_stages):
                if key in local and key not in done:
                    out.append(Violation(f"runs before its predecessor {key[0]}{key[1]}{key[2]} "
                                         "on the same rank", r, pos, str(a)))
                    break
            done.update(provides(a))
    return out


def validate(schedule: Schedule, costs: StageCosts, *, num_microbatches: int,
             memory_limit_bytes: int | Sequence[int | None] | None = None,
             deadlines: dict[Key, float] | None = None, meter: WorkMeter | None = None) -> list[Violation]:
    """All violations found; an empty list means the schedule is valid. The simulation's
    timed actions are added to ``meter`` ([Note: timed actions] in ``planner.core.meter``).

    [Note: checks in array form] The structural checks (1-3) run first as array checks
    while compiling (``compile_sound``); only when one fails do the per-action checks
    below run, to find and describe the violation. Same result, a fraction of the time
    on large schedules (they dominated validating a 196,608-action plan)."""
    try:
        comp = compile_sound(schedule, costs.num_stages, costs.ranks, num_microbatches)
        if comp is None:
            for check in (_check_placement, _check_coverage):
                found = check(schedule, costs, num_microbatches)
                if found:
                    return found
            found = _check_rank_order(schedule, costs)
            if found:
                return found
            sim = simulate(schedule, costs, meter=meter)
        else:
            sim = simulate_compiled(comp, costs, meter=meter)
    except DeadlockError as exc:
        return [Violation("deadlock: waits for work that can never arrive", r, p,
                          str(schedule[r][p])) for r, p in exc.blocked.items()]
    return _check_deadlines(sim, deadlines or {}) + _check_memory(sim, memory_limit_bytes)


def _check_deadlines(sim: SimResult, deadlines: dict[Key, float]) -> list[Violation]:
    out = []
    positions = _positions(sim)
    for n, a in enumerate(sim.actions):
        for key in provides(a):
            if key in deadlines and sim.end[n] > deadlines[key] + 1e-12:
                r, pos = positions[n]
                out.append(Violation(f"{key[0]}{key[1]}{key[2]} ends at {sim.end[n]:.6g} s, after its "
                                     f"deadline {deadlines[key]:.6g} s", r, pos, str(a)))
    return out


def _check_memory(sim: SimResult, limits: int | Sequence[int | None] | None) -> list[Violation]:
    """Each rank's peak against its limit: one for all, or one per rank (mixed fleets)."""
    if limits is None:
        return []
    out = []
    for r, peak in enumerate(sim.peak_memory_bytes):
        limit = limits if isinstance(limits, int) else limits[r]
        if limit is not None and peak > limit:
            pos, action = _first_over(sim, r, limit)
            out.append(Violation(f"rank {r} peak memory {format_bytes(peak)} exceeds the limit "
                                 f"{format_bytes(limit)}", r, pos, action))
    return out


def _first_over(sim: SimResult, rank: int, limit: int) -> tuple[int | None, str | None]:
    """Position and text of the first action on ``rank`` after whose allocation static +
    activation bytes exceed ``limit``; (None, None) when static bytes alone do."""
    static = sim.peak_memory_bytes[rank] - sim.peak_act_bytes[rank]
    if static > limit:
        return None, None
    held = iter(sim.memory[rank][1:])  # one (time, bytes) per part of each action, in order
    for pos, n in enumerate(sim.compiled.order[rank]):
        for _ in sim.actions[n].parts:
            if static + next(held)[1] > limit:
                return pos, str(sim.actions[n])
    return None, None


def _positions(sim: SimResult) -> list[tuple[int, int]]:
    count: dict[int, int] = {}
    out = []
    for r in sim.rank_of:
        out.append((r, count.get(r, 0)))
        count[r] = count.get(r, 0) + 1
    return out


