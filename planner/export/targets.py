"""Which ``--target`` frameworks can run a plan as it is: each target's exporter is asked.

torch runs every valid plan (its CSV runtime takes any order and placement; fused pairs
run through ``planner/runtime/``); the others run a plan exactly when their exporter
(``planner.export``) accepts it, so the answer and the export never disagree.
"""

from __future__ import annotations

from planner.core.plan import Plan
from planner.core.targets import DEFAULT_TARGET, TARGETS, target_of
from planner.export.schedule import ExportError

__all__ = ["runnable_targets", "runs_on_line"]


def runnable_targets(plan: Plan) -> dict[str, str | None]:
    """Target name -> None when it runs ``plan`` as planned, else the exporter's refusal."""
    from planner.export import export_plan

    out: dict[str, str | None] = {}
    for name, target in TARGETS.items():
        try:
            export_plan(plan, target.export_format)
            out[name] = None
        except ExportError as exc:
            out[name] = exc.problem
    return out


def runs_on_line(plan: Plan) -> str:
    """One summary line: the target the plan was made for and where it runs as it is."""
    made_for = target_of(plan.extra.get("target"))
    found = runnable_targets(plan)
    ok = [n for n, why in found.items() if why is None]
    not_ok = [n for n, why in found.items() if why is not None]
    text = f"made for --target {made_for}; runs as planned on: {', '.join(ok) or 'none'}"
    if not_ok:
        text += f"; for {', '.join(not_ok)} re-plan with --target " + " / ".join(not_ok)
    if made_for == DEFAULT_TARGET and any(a.startswith("(") for acts in plan.schedule.values() for a in acts):
        text += " (torch runs its fused F&B pairs with planner/runtime/)"
    return text
