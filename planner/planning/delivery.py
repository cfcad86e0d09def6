"""The last check before a plan leaves ppplan: it reads back and it is valid.

[Note: delivered plans] Every front door that makes a plan (``planner.api.plan``, and so
``ppplan plan``; ``planner.replanning.replan``, and so ``ppplan replan``) hands it through
``deliver`` before returning or writing it. The plan's JSON text (``Plan.to_json``, which
refuses NaN and infinities) is read back the way users read it (the guarded reader and
``Plan.from_dict`` with the schema), and the plan read back is checked by the validator
(``planner.core.validate.validate``) with its own memory limit and the request's
deadlines. A plan failing either is a bug of the planner, raised as ``PlanDefect`` (the
CLI's internal error, nothing written), never a file that ``ppplan validate``, ``simulate``,
``export`` or ``replay`` then refuse. What leaves is a ``planner.export.LaunchPlan``: every
front door returns the one type, with the launchers' views (``megatron_args``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.core.errors import InputError
from planner.core.jsonio import UnreadableOutput
from planner.core.plan import Plan
from planner.core.reader import parse_json
from planner.core.validate import validate
from planner.export import LaunchPlan
from solvers.schedule.search.deadlines import parse_deadlines

__all__ = ["PlanDefect", "deliver"]


class PlanDefect(RuntimeError):
    """A plan the planner made that its own loader or validator refuses: a bug, not bad input."""


def deliver(plan: Plan, *, deadlines: Sequence[str] = ()) -> LaunchPlan:
    """``plan`` (as a ``LaunchPlan``, fields shared), once its JSON reads back and validates ([Note: delivered plans]);
    ``deadlines`` are the request's ``--deadline`` items (``TASK=SECONDS``)."""
    try:
        loaded = Plan.from_dict(parse_json(plan.to_json(), what="plan", source="the plan made"), what="plan")
    except (UnreadableOutput, InputError) as exc:
        raise PlanDefect(f"the plan made fails its own loader: {exc}") from None
    due = parse_deadlines(list(deadlines), num_stages=loaded.num_stages,
                          microbatches=loaded.num_microbatches) if deadlines else {}
    found = validate(loaded.parsed_schedule(), loaded.parsed_stage_costs(), num_microbatches=loaded.num_microbatches,
                     memory_limit_bytes=loaded.memory_limits, deadlines=due)
    if found:
        raise PlanDefect(f"the plan made fails its own validator: {found[0]}")
    return LaunchPlan.of(plan)
