"""Steady-state step time: the period of repeated steps with no global barrier between them.

[Note: steady state] ``simulate`` times one step from an empty pipeline to an empty
pipeline (the makespan), as if a global barrier separated steps. Without one,
consecutive steps overlap across ranks and throughput is set by the period of the
repeated step. What still synchronises step k and step k + 1 here:

- per rank, step k + 1's actions run after all of that rank's step-k actions, in the
  same order (its optimizer step follows its own last W; the simulator takes it as
  instantaneous, like the gradient reduction, see ``planner.core.simulate``);
- every action waits for its own microbatch's dependencies on other ranks (plus P2P).

No global barrier remains: the gradient-norm clipping and NaN/inf check that would need
one are validated after the fact and the step rolled back if they fail, Zero Bubble's
*optimizer post-validation* (Qi et al., ICLR 2024, "Zero Bubble Pipeline Parallelism",
sec. 4). So step k + 1's warm-up on later ranks overlaps step k's cool-down on earlier
ranks.

The period is measured, not derived: ``STEPS`` consecutive copies of the schedule
(microbatches renumbered per copy) are timed as one schedule, and the period is the
mean distance between the ends of the copies after the first, ``(T_K - T_1) / (K - 1)``
with T_k the end of copy k's last action (the first step starts from an empty pipeline;
averaging two periods also settles schedules whose repeats alternate). Memory is unchanged: a rank starts the next step only after its own
last action of this one, by which time it holds no activations.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.compiled import Compiled, compile_schedule, run_in_order
from planner.core.schedule import OVERLAP, Action, Schedule
from planner.core.simulate import durations
from planner.core.stage_costs import StageCosts

__all__ = ["STEPS", "SteadyState", "repeat_schedule", "steady_state"]

STEPS = 3
"""Consecutive steps simulated to measure the period ([Note: steady state])."""


@dataclass(frozen=True, kw_only=True)
class SteadyState:
    """The repeated step's timing."""

    period_s: float
    """Steady-state step time: seconds between the ends of consecutive steps."""
    first_step_s: float
    """End of the first step (the makespan of one step)."""
    step_ends_s: tuple[float, ...]
    """End of each simulated step's last action."""
    bubble_fraction: float
    """Mean idle share of the period over ranks (1 - rank work / period)."""


def _shift(action: Action, offset: int) -> Action:
    if action.kind == OVERLAP:
        f, b = action.parts
        return Action.fused(_shift(f, offset), _shift(b, offset))
    return Action(action.stage, action.kind, action.microbatch + offset)


def repeat_schedule(schedule: Schedule, microbatches: int, steps: int) -> Schedule:
    """``steps`` copies of ``schedule`` per rank, copy k's microbatches shifted by k x M
    (the repeated steps as one schedule; ``steady_state`` times them without building it)."""
    return {r: [_shift(a, k * microbatches) for k in range(steps) for a in row]
            for r, row in schedule.items()}


def steady_state(schedule: Schedule, costs: StageCosts, microbatches: int, *,
                 steps: int = STEPS, compiled: Compiled | None = None) -> SteadyState:
    """Period of ``schedule`` repeated without a global barrier ([Note: steady state]).

    Times the one-step graph ``steps`` times, each rank's first action of step k + 1
    starting no earlier than that rank's last action of step k ended (``run_in_order``'s
    ``ready``): the same longest paths as simulating the repeated schedule
    (``repeat_schedule``), without building it. ``microbatches`` is the step's count (the
    repeated schedule's offset; the timing does not need it)."""
    if steps < 3:
        raise ValueError("steady_state needs at least 3 steps")
    comp = compiled or compile_schedule(schedule, costs.num_stages, costs.ranks)
    dur = durations(comp, costs)
    delay = costs.p2p_delays()
    ready = [0.0] * len(comp.order)
    ends: list[float] = []
    for _ in range(steps):
        _, end = run_in_order(comp, dur, delay, ready=ready, keep_order=False)
        ready = [end[row[-1]] if row else ready[r] for r, row in enumerate(comp.order)]
        ends.append(max(ready, default=0.0))
    period = (ends[-1] - ends[0]) / (steps - 1)
    busy = [sum(dur[row[0]: row[-1] + 1]) if row else 0.0 for row in comp.order]
    bubble = sum(period - w for w in busy) / (len(busy) * period) if period > 0 and busy else 0.0
    return SteadyState(period_s=period, first_step_s=ends[0], step_ends_s=tuple(ends),
                       bubble_fraction=max(0.0, bubble))
