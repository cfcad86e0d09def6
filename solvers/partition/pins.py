"""Pinned stage sizes: how many decoder layers the first and the last stage hold.

Megatron's ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``
(megatron/training/arguments.py): users shrink the first stage (it also holds the embedding) and the
last stage (MTP and the loss head) by hand. Here a pin fixes one stage boundary: the
first stage ends right after its ``first``-th decoder layer, the last stage starts at
its first of the last ``last`` decoder layers; the solvers place the other stages
around it. ``0`` is allowed: the first stage then holds the embedding alone, the last
stage only what follows the decoder layers (MTP and head). ``stages`` pins every boundary
(the user's own layout, ``ppplan plan --layout``): every partition method then returns it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.core.errors import InputError

__all__ = ["StagePins", "pinned_cuts", "pins_allow"]


@dataclass(frozen=True, kw_only=True)
class StagePins:
    """Decoder layers fixed on the first and the last stage (None = free)."""

    first: int | None = None
    """Decoder layers of stage 0 (``--first-stage-layers``)."""
    last: int | None = None
    """Decoder layers of the last stage (``--last-stage-layers``)."""
    stages: tuple[tuple[int, int], ...] | None = None
    """Layer range of every stage (``--layout``, read by ``planner.core.layout_text``)."""

    @property
    def any(self) -> bool:
        """Whether anything is pinned."""
        return self.first is not None or self.last is not None or self.stages is not None


def pinned_cuts(pins: StagePins, roles: Sequence[str], num_stages: int) -> dict[int, int]:
    """Boundary index k (stage k starts there, 1..S-1) -> layer index, checked.

    Raises ``InputError`` naming the option when the pins cannot hold.
    """
    if pins.stages is not None:
        if len(pins.stages) != num_stages or pins.stages[-1][1] != len(roles):
            raise InputError("--layout", f"{len(pins.stages)} stages over {pins.stages[-1][1]} layers, the "
                             f"plan has {num_stages} stages over {len(roles)}", "match --pp x --vpp")
        return {k: pins.stages[k][0] for k in range(1, num_stages)}
    dec = [k for k, r in enumerate(roles) if r == "decoder"]
    n, nd = len(roles), len(dec)
    cuts: dict[int, int] = {}
    for opt, value in (("--first-stage-layers", pins.first), ("--last-stage-layers", pins.last)):
        if value is not None and not 0 <= value <= nd:
            raise InputError(opt, f"{value} is not in 0..{nd} (the model has {nd} decoder layers)")
    if num_stages == 1:
        if pins.any:
            raise InputError("--first-stage-layers" if pins.first is not None else "--last-stage-layers",
                             "pins need at least 2 stages", "raise pp or drop the pin")
        return cuts
    first = last = None
    if pins.first is not None:
        first = dec[pins.first - 1] + 1 if pins.first else (dec[0] if dec else 1)
        cuts[1] = first
    if pins.last is not None:
        last = dec[nd - pins.last] if pins.last else (dec[-1] + 1 if dec else n - 1)
        cuts[num_stages - 1] = last
    opt = "--first-stage-layers" if pins.first is not None else "--last-stage-layers"
    if num_stages == 2 and first is not None and last is not None and first != last:
        raise InputError(opt, f"with 2 stages the pins must meet: the first stage ends at layer "
                         f"{first}, the last starts at {last}", "pin only one of them")
    lo, hi = first if first is not None else 1, last if last is not None else n - 1
    middle = num_stages - 2
    if lo <= 0 or hi >= n or hi - lo < middle:
        raise InputError(opt, f"the pins leave layers [{lo}, {hi}) for {middle} middle stage(s)",
                         "pin fewer layers or use fewer stages")
    return cuts


def pins_allow(cuts: dict[int, int]):
    """Range test: stage s may hold [a, b) only if it respects the pinned boundaries."""
    def allowed(s: int, a: int, b: int) -> bool:
        return cuts.get(s, a) == a and cuts.get(s + 1, b) == b
    return allowed
