"""Actions and schedules as plain data, in torch.distributed.pipelining's text form.

An action is ``(stage, kind, microbatch)``: ``2F0`` forward of stage 2 on microbatch 0,
``2I0`` input-gradient, ``2W0`` weight-gradient, ``2B0`` full backward (I then W), and
``(0F3;7I1)OVERLAP_F_B`` a fused pair run concurrently. A schedule is one ordered list
of actions per rank: ``dict[int, list[Action]]``.

Dependencies are defined once, in ``predecessors``, and used by the validator, the
simulator and the CP-SAT model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "Action",
    "ActionKind",
    "Schedule",
    "Key",
    "COMPUTE_KINDS",
    "parse_action",
    "whole_backward",
    "format_schedule",
    "parse_schedule",
    "provides",
    "predecessors",
    "DEPENDENCIES",
    "OVERLAP",
    "schedule_to_text",
]



class ActionKind(StrEnum):
    """What an action computes, spelled as torch.distributed.pipelining spells it
    (``_ComputationType`` in torch/distributed/pipelining/schedules.py). A ``StrEnum``:
    each member equals its letter (``ActionKind.F == "F"``), so text and JSON forms are
    unchanged and a kind read from a file compares equal to the member."""

    F = "F"
    """Forward."""
    I = "I"  # noqa: E741 - torch's own letter for the input-gradient backward
    """Input-gradient half of the backward."""
    W = "W"
    """Weight-gradient half of the backward."""
    B = "B"
    """Full backward (I then W)."""
    OVERLAP_F_B = "OVERLAP_F_B"
    """A forward and a backward of different microbatches run concurrently."""


COMPUTE_KINDS = (ActionKind.F, ActionKind.I, ActionKind.W, ActionKind.B)
OVERLAP = ActionKind.OVERLAP_F_B

Key = tuple[int, str, int]
"""(stage, kind, microbatch) of one unit of work; kind in F, I, W (``ActionKind`` members)."""

_ATOM = re.compile(r"^([0-9]{1,18})(F|I|W|B)([0-9]{1,18})$")
"""ASCII digits only (``\\d`` would read Arabic-Indic digits too), at most 18 of them (below 2^63)."""


@dataclass(frozen=True, slots=True)
class Action:
    """One entry of a rank's schedule."""

    stage: int
    """Stage index (for a fused action: the forward's stage)."""
    kind: ActionKind
    """F, I, W, B or OVERLAP_F_B."""
    microbatch: int
    """Microbatch index (for a fused action: the forward's microbatch)."""
    sub: tuple["Action", ...] = ()
    """For OVERLAP_F_B: (forward action, backward action)."""

    def __str__(self) -> str:
        if self.kind == OVERLAP:
            return f"({';'.join(str(a) for a in self.sub)}){OVERLAP}"
        return f"{self.stage}{self.kind}{self.microbatch}"

    @property
    def parts(self) -> tuple["Action", ...]:
        """The plain actions this action performs (itself unless fused)."""
        return self.sub if self.kind == OVERLAP else (self,)

    @staticmethod
    def fused(forward: "Action", backward: "Action") -> "Action":
        """The OVERLAP_F_B action running ``forward`` beside ``backward`` (I or B); raises
        ``ValueError`` for any other pair (so a fused action has at most 1 + 2 dependencies)."""
        if forward.kind != ActionKind.F or backward.kind not in (ActionKind.I, ActionKind.B):
            raise ValueError(f"cannot fuse {forward} with {backward}: OVERLAP_F_B runs an F beside an I or B")
        return Action(forward.stage, OVERLAP, forward.microbatch, (forward, backward))


Schedule = dict[int, list[Action]]


def parse_action(text: str) -> Action:
    """Parse the text form; raises ``ValueError`` naming the token on a bad one."""
    t = text.strip()
    if t.endswith(")" + OVERLAP) and t.startswith("("):
        inner = t[1: -len(OVERLAP) - 1].split(";")
        if len(inner) != 2:
            raise ValueError(f"bad fused action {text!r}: expected (xFm;yIn){OVERLAP}")
        fwd, bwd = parse_action(inner[0]), parse_action(inner[1])
        if fwd.kind != ActionKind.F or bwd.kind not in (ActionKind.I, ActionKind.B):
            raise ValueError(f"bad fused action {text!r}: first part must be F, second I or B")
        return Action.fused(fwd, bwd)
    m = _ATOM.match(t)
    if not m:
        raise ValueError(f"bad action {text!r:.40}: expected e.g. 2F0, 2I0, 2W0, 2B0 or (0F3;7I1){OVERLAP} "
                         f"(ASCII digits, at most 18)")
    return Action(int(m.group(1)), ActionKind(m.group(2)), int(m.group(3)))


def provides(action: Action) -> list[Key]:
    """Units of work the action completes (B completes both I and W)."""
    out: list[Key] = []
    for a in action.parts:
        if a.kind == ActionKind.B:
            out += [(a.stage, ActionKind.I, a.microbatch), (a.stage, ActionKind.W, a.microbatch)]
        else:
            out.append((a.stage, a.kind, a.microbatch))
    return out


_F, _I, _W, _B = ActionKind.F, ActionKind.I, ActionKind.W, ActionKind.B
DEPENDENCIES: dict[str, tuple[tuple[int, ActionKind], ...]] = {
    _F: ((-1, _F),),
    _I: ((0, _F), (1, _I)),
    _B: ((0, _F), (1, _I)),
    _W: ((0, _I),),
}
"""The one definition of data dependencies: kind -> (stage offset, kind) of the same
microbatch that must finish first; targets outside [0, num_stages) are dropped.

F(s, m) needs F(s-1, m); I or B (s, m) needs F(s, m) and the input-gradient of stage
s+1 (the last stage computes the loss itself, so needs only its F); W(s, m) needs I(s, m).
"""


def predecessors(action: Action, num_stages: int) -> list[Key]:
    """Units of work that must finish before ``action`` starts (see ``DEPENDENCIES``).

    A fused action needs what its parts need, except what the other part provides.
    """
    own = set(provides(action)) if action.kind == OVERLAP else ()
    out: list[Key] = []
    for a in action.parts:
        for off, kind in DEPENDENCIES[a.kind]:
            t = a.stage + off
            if 0 <= t < num_stages and (t, kind, a.microbatch) not in own:
                out.append((t, kind, a.microbatch))
    return out


def parse_schedule(data: dict[str, list[str]]) -> Schedule:
    """Rank (as string) -> action strings, to a ``Schedule``; raises ``ValueError`` naming rank and position."""
    sched: Schedule = {}
    atom, kinds = _ATOM.match, {k.value: k for k in COMPUTE_KINDS}
    for rank_text, actions in data.items():
        rank = int(rank_text)
        parsed = []
        for pos, text in enumerate(actions):
            m = atom(text)  # the common plain action, without parse_action's call (large plans load in one pass)
            if m is not None:
                parsed.append(Action(int(m[1]), kinds[m[2]], int(m[3])))
                continue
            try:
                parsed.append(parse_action(text))
            except ValueError as exc:
                raise ValueError(f"schedule[{rank_text}][{pos}]: {exc}") from None
        sched[rank] = parsed
    return dict(sorted(sched.items()))


def whole_backward(schedule: Schedule) -> Schedule | None:
    """``schedule`` with each I followed at once by the same stage and microbatch's W (on one
    rank) written as one B, or None when some W is not right after its I."""
    out: Schedule = {}
    for rank, acts in schedule.items():
        row: list[Action] = []
        for a in acts:
            if a.kind == ActionKind.W:
                prev = row[-1] if row else None
                if prev is None or prev.kind != ActionKind.I or (prev.stage, prev.microbatch) != (a.stage, a.microbatch):
                    return None
                row[-1] = Action(a.stage, ActionKind.B, a.microbatch)
            else:
                row.append(a)
        out[rank] = row
    return out


def format_schedule(schedule: Schedule) -> dict[str, list[str]]:
    """``Schedule`` to its JSON form: rank as string -> action strings."""
    return {str(r): [str(a) for a in schedule[r]] for r in sorted(schedule)}


def schedule_to_text(schedule: Schedule, *, mark: tuple[int, int] | None = None,
                     window: tuple[int, int] | None = None) -> str:
    """The rank x step grid, one row per rank; ``mark=(rank, pos)`` brackets one cell."""
    lo, hi = window if window else (0, max((len(v) for v in schedule.values()), default=0))
    cells = {r: [str(a) for a in acts] for r, acts in schedule.items()}
    width = max([len(c) for row in cells.values() for c in row[lo:hi]] + [3]) + (4 if mark else 2)
    lines = ["rank | " + "".join(f"{k:<{width}}" for k in range(lo, hi))]
    for r in sorted(schedule):
        row = []
        for k in range(lo, hi):
            c = cells[r][k] if k < len(cells[r]) else ""
            if mark == (r, k):
                c = f">{c}<"
            row.append(f"{c:<{width}}")
        lines.append(f"{r:>4} | " + "".join(row).rstrip())
    return "\n".join(lines)
