"""From a plan to what torch.distributed.pipelining runs: checks and ``_Action`` lists.

The plan's per-rank order is handed to ``_PipelineScheduleRuntime`` as a compute-only
schedule (F, I, W, B and ``OVERLAP_F_B`` pairs, exactly as planned); torch lowers it
(``_add_send_recv``) and infers the stage-to-rank map from it (``_validate_schedule``).
Before any process starts, the plan is checked here: world size, schedule validity
(``planner.core.validate`` without the memory limit, which was set for another
device) and the model it names.
"""

from __future__ import annotations

from typing import Any

from planner.core.errors import InputError
from planner.core.plan import Plan
from planner.core.schedule import Action, Schedule
from planner.core.validate import render_violation, validate

__all__ = ["check_plan", "to_torch_actions", "flat_parts"]


def check_plan(plan: Plan, *, world_size: int) -> None:
    """Raise ``InputError`` when ``plan`` cannot be replayed on ``world_size`` processes."""
    if plan.pp != world_size:
        raise InputError("plan.parallel.pp", f"the plan has pp={plan.pp} but the replay runs "
                         f"{world_size} processes", f"launch exactly {plan.pp} ranks (torchrun "
                         f"--nproc-per-node {plan.pp}) or replay a plan made with --pp {world_size}")
    schedule = plan.parsed_schedule()
    missing = [r for r in range(plan.pp) if not schedule.get(r)]
    if missing:
        raise InputError(f"plan.schedule.{missing[0]}", "rank has no actions",
                         "every pipeline rank needs its action list")
    violations = validate(schedule, plan.parsed_stage_costs(), num_microbatches=plan.num_microbatches)
    if violations:
        first = render_violation(violations[0], schedule).splitlines()[0]
        raise InputError("plan.schedule", f"fails validation: {first}",
                         "re-run ppplan plan, or fix the order and check it with ppplan validate")


def to_torch_actions(schedule: Schedule) -> dict[int, list[Any]]:
    """The plan's order as torch ``_Action`` lists (same text form, parsed by torch)."""
    from torch.distributed.pipelining.schedules import _Action

    return {rank: [_Action.from_str(str(a)) for a in acts] for rank, acts in sorted(schedule.items())}


def flat_parts(actions: list[Action]) -> list[tuple[int, int, str, int]]:
    """(action position, stage, kind, microbatch) of every plain part, in execution order.

    This is the order in which the runtime calls the stage's compute methods, so the
    k-th timed span of a rank belongs to the k-th entry here.
    """
    return [(pos, p.stage, p.kind, p.microbatch) for pos, a in enumerate(actions) for p in a.parts]
