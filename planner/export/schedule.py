"""What a plan's schedule asks of a framework: placement style, fused pairs, split and moved W.

Exporters use these facts to decide whether a target can run the plan as planned, and
refuse (``ExportError``) when it cannot, rather than emit a different schedule.
"""

from __future__ import annotations

from collections.abc import Callable

from planner.core.errors import InputError
from planner.core.placement import stage_ranks
from planner.core.plan import Plan
from planner.core.schedule import OVERLAP, Action, ActionKind, Schedule
from planner.core.targets import target_for_format
from planner.core.validate import validate

__all__ = ["ExportError", "check_exportable", "placement_style", "has_fused", "split_w",
           "moved_w", "merged_order", "first_difference", "kind_order"]


class ExportError(InputError):
    """The target framework cannot express this plan; the message names what and the way out.

    Unless ``replan=False`` (the refusal is not about what the format can express), the fix
    starts with the ``--target`` whose plans this format runs (``planner.core.targets``).
    """

    def __init__(self, fmt: str, problem: str, fix: str = "", *, replan: bool = True) -> None:
        target = target_for_format(fmt) if replan else None
        if target is not None:
            fix = f"re-plan with --target {target}" + (f"; or {fix}" if fix else "")
        super().__init__(f"export --format {fmt}", problem, fix)


def check_exportable(plan: Plan, fmt: str) -> Schedule:
    """The plan's parsed schedule, after checking it is structurally valid (memory aside)."""
    sched = plan.parsed_schedule()
    found = validate(sched, plan.parsed_stage_costs(), num_microbatches=plan.num_microbatches,
                     memory_limit_bytes=None)
    if found:
        raise ExportError(fmt, f"the plan's schedule is invalid: {found[0]}",
                          "run ppplan validate PLAN and fix or re-plan it", replan=False)
    return sched


def placement_style(plan: Plan) -> str:
    """``loop`` or ``v`` when the stage-to-rank map is one of those, else ``custom``."""
    ranks = plan.ranks()
    for style in ("loop", "v"):
        if ranks == stage_ranks(plan.num_stages, plan.pp, style):
            return style
    return "custom"


def has_fused(schedule: Schedule) -> bool:
    """Whether any action is an OVERLAP_F_B pair."""
    return any(a.kind == OVERLAP for acts in schedule.values() for a in acts)


def split_w(schedule: Schedule) -> bool:
    """Whether backward is split into I and W anywhere."""
    return any(p.kind == ActionKind.W for acts in schedule.values() for a in acts for p in a.parts)


def moved_w(schedule: Schedule) -> list[tuple[int, int, Action]]:
    """W actions that do not run right after their input-gradient, as (rank, position, W).

    "Right after" means the next action on the rank, counting a fused action that holds
    the I as the I itself.
    """
    out = []
    for r, acts in schedule.items():
        for pos, a in enumerate(acts):
            if a.kind != ActionKind.W:
                continue
            prev = acts[pos - 1].parts if pos else ()
            if not any(p.kind == ActionKind.I and p.stage == a.stage and p.microbatch == a.microbatch
                       for p in prev):
                out.append((r, pos, a))
    return out


def merged_order(acts: list[Action]) -> list[str]:
    """A rank's work as F/B items: fused pairs become F then B, I becomes B, W drops out.

    Only meaningful once ``moved_w`` is empty (each W follows its I, so I+W is a backward).
    """
    out = []
    for a in acts:
        for p in a.parts:
            if p.kind == ActionKind.F:
                out.append(f"{p.stage}F{p.microbatch}")
            elif p.kind in (ActionKind.I, ActionKind.B):
                out.append(f"{p.stage}B{p.microbatch}")
    return out


def kind_order(acts: list[Action], kind: str) -> list[str]:
    """The ``merged_order`` items of one kind (F or B), in order."""
    return [x for x in merged_order(acts) if kind in x]


def first_difference(got: Schedule, want: Schedule, *,
                     view: Callable[[list[Action]], list[str]] = merged_order,
                     ) -> tuple[int, int, str, str] | None:
    """First (rank, position, plan item, reference item) where two schedules' views differ."""
    for r in sorted(set(got) | set(want)):
        a, b = view(got.get(r, [])), view(want.get(r, []))
        for pos in range(max(len(a), len(b))):
            x = a[pos] if pos < len(a) else "(end)"
            y = b[pos] if pos < len(b) else "(end)"
            if x != y:
                return r, pos, x, y
    return None
