"""Schedule families by name: what each draws, which shapes it runs, which a user may name.

``generate`` draws a named order for the uniform picture (the planner's partition
search needs an order before costs per stage exist); ``candidate_schedules`` lists the
families ``auto`` screens for a shape. Choosing among them for real stage costs is
``solvers.schedule.search.search.best_schedule``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.core.costs import CostTable
from planner.core.errors import InputError
from planner.core.placement import stage_ranks
from planner.core.schedule import Schedule
from planner.core.stage_costs import StageCosts
from solvers.schedule.families.dualpipev_list import dualpipev_list
from solvers.schedule.families.dualpipev_exact import dualpipev_exact
from solvers.schedule.families.generators import gpipe, interleaved_1f1b, one_f_one_b
from solvers.schedule.families.zero_bubble import zb_h1, zb_h2, zb_v

__all__ = ["ScheduleKind", "SCHEDULES", "SCHEDULE_CHOICES", "EXACT_FAMILIES", "generate", "applies",
           "candidate_schedules", "check_schedule_option", "placement_of", "fuses"]

EXACT_FAMILIES = ("gpipe", "1f1b", "1f1b-overlap", "interleaved", "interleaved-overlap")
"""Families a user names to get exactly that order (what Megatron, DeepSpeed or torch's
built-in schedules run): W stays right after its input-gradient, nothing is moved. The
zero-bubble and V families move W by design, so their W-filled versions are theirs too."""


@dataclass(frozen=True)
class ScheduleKind:
    """A named schedule family."""

    make: Callable[[int, int, int], Schedule]
    """(pp, vpp, microbatches) -> schedule."""
    fused: bool = False
    """Whether it runs F and B of different microbatches as OVERLAP_F_B pairs."""
    placement: str = "loop"
    """Stage placement it assumes."""
    vpp: tuple[int, ...] = (1,)
    """Virtual stage counts it supports (empty = any)."""


def _one_stage(fn: Callable[..., Schedule], **kw: bool) -> Callable[[int, int, int], Schedule]:
    return lambda pp, vpp, m: fn(pp, m, **kw)


SCHEDULES: dict[str, ScheduleKind] = {
    "gpipe": ScheduleKind(_one_stage(gpipe)),
    "1f1b": ScheduleKind(_one_stage(one_f_one_b)),
    "1f1b-overlap": ScheduleKind(_one_stage(one_f_one_b, fuse=True), fused=True),
    "interleaved": ScheduleKind(lambda pp, vpp, m: interleaved_1f1b(pp, vpp, m), vpp=()),
    "interleaved-overlap": ScheduleKind(lambda pp, vpp, m: interleaved_1f1b(pp, vpp, m, fuse=True), fused=True,
                                       vpp=()),
    "zb-h1": ScheduleKind(_one_stage(zb_h1)),
    "zb-h2": ScheduleKind(_one_stage(zb_h2)),
    "zbv": ScheduleKind(_one_stage(zb_v), placement="v", vpp=(2,)),
    "dualpipev": ScheduleKind(_one_stage(dualpipev_exact), fused=True, placement="v", vpp=(2,)),
    "dualpipev-list": ScheduleKind(_one_stage(dualpipev_list), fused=True, placement="v", vpp=(2,)),
}

SCHEDULE_CHOICES = ("auto", *SCHEDULES, "cpsat")
"""Values of ``--schedule``: a family, ``auto`` (best heuristic, CP-SAT polish) or ``cpsat``."""


def check_schedule_option(name: str, *, vpp: int, placement: str) -> None:
    """``InputError`` for unknown names and shapes a family cannot run."""
    if name in ("auto", "cpsat"):
        return
    kind = SCHEDULES.get(name)
    if kind is None:
        raise InputError("--schedule", f"unknown schedule {name!r}", f"use one of {', '.join(SCHEDULE_CHOICES)}")
    if kind.vpp and vpp not in kind.vpp:
        fix = "use --schedule interleaved for vpp > 1" if kind.vpp == (1,) else \
            f"use --vpp {kind.vpp[0]} --placement {kind.placement}"
        raise InputError("--schedule", f"{name} supports vpp {', '.join(map(str, kind.vpp))}, got {vpp}", fix)
    if kind.placement != placement and vpp > 1:
        raise InputError("--schedule", f"{name} needs --placement {kind.placement}, got {placement}",
                         f"pass --placement {kind.placement}")


def generate(name: str, *, pp: int, vpp: int, microbatches: int) -> Schedule:
    """Generate schedule ``name``; unknown names and unsupported vpp are ``InputError``."""
    kind = SCHEDULES.get(name)
    if kind is None:
        raise InputError("--schedule", f"unknown schedule {name!r}", f"use one of {', '.join(SCHEDULE_CHOICES)}")
    check_schedule_option(name, vpp=vpp, placement=kind.placement)
    return kind.make(pp, vpp, microbatches)


def applies(kind: ScheduleKind, vpp: int, placement: str) -> bool:
    """Whether ``kind`` runs ``vpp`` stages per rank on ``placement``."""
    return (vpp in kind.vpp if kind.vpp else vpp > 1) and (kind.placement == placement or vpp == 1)


def candidate_schedules(name: str, table: CostTable, *, vpp: int, placement: str) -> list[str]:
    """Schedules ``auto`` (and ``cpsat``, for its warm start) try for this shape; a named one alone."""
    if name not in ("auto", "cpsat"):
        return [name]
    names = [n for n, k in SCHEDULES.items() if n != "gpipe" and applies(k, vpp, placement)]
    has_overlap = any(table.ov(a, a) < table.serial_pair(a, a) - 1e-12 for a in range(table.num_layers))
    return [n for n in names if has_overlap or not SCHEDULES[n].fused]


def placement_of(costs: StageCosts) -> str:
    """``v`` when the stages sit on the ranks in V order, else ``loop``."""
    S, pp = costs.num_stages, costs.num_ranks
    return "v" if S > pp and list(costs.ranks) == stage_ranks(S, pp, "v") else "loop"


def fuses(costs: StageCosts) -> bool:
    """Whether some F beside an I on one rank is cheaper than the two in turn."""
    return any(t < costs.f[a] + costs.i[b] - 1e-15 for (a, b), t in costs.fused.items())
