"""Registry of schedule generators by name, used by the planner's front door."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.core.costs import CostTable
from planner.core.errors import InputError
from planner.core.schedule import Schedule
from solvers.generators import gpipe, interleaved_1f1b, one_f_one_b

__all__ = ["ScheduleKind", "SCHEDULES", "generate", "candidate_schedules"]


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
}


def generate(name: str, *, pp: int, vpp: int, microbatches: int) -> Schedule:
    """Generate schedule ``name``; unknown names and unsupported vpp are ``InputError``."""
    kind = SCHEDULES.get(name)
    if kind is None:
        raise InputError("--schedule", f"unknown schedule {name!r}", f"use one of auto, {', '.join(SCHEDULES)}")
    if kind.vpp and vpp not in kind.vpp:
        raise InputError("--schedule", f"{name} supports vpp {', '.join(map(str, kind.vpp))}, got {vpp}",
                         "use --schedule interleaved for vpp > 1")
    return kind.make(pp, vpp, microbatches)


def candidate_schedules(name: str, table: CostTable, *, vpp: int, placement: str) -> list[str]:
    """Schedules ``auto`` tries for this shape; a named schedule alone otherwise."""
    if name != "auto":
        return [name]
    names = [n for n, k in SCHEDULES.items()
             if n != "gpipe" and (vpp in k.vpp if k.vpp else vpp > 1) and k.placement == placement]
    has_overlap = any(table.ov(a, a) < table.serial_pair(a, a) - 1e-12 for a in range(table.num_layers))
    return [n for n in names if has_overlap or not SCHEDULES[n].fused]
