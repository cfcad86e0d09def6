"""Memory limits for schedules: bytes per GPU, or microbatches' worth of activations.

``--memory-limit`` accepts ``80GiB``, ``80GB``, ``8.5e10`` (bytes per GPU: parameters,
gradients, optimizer state and activations together) or ``4microbatches`` (``4mb``: each
rank may hold 4 microbatches' worth of the activations its stages keep, the unit the
zero-bubble papers use: 1F1B needs p, ZB-H2 2p - 1).

[Note: one memory rule] Whatever its form, a limit is checked one way, the validator's
(``planner.core.validate``): every rank's simulated peak (static + activations) against
one byte count per GPU, ``per_gpu_bytes``. The microbatch form becomes that count for given
stage costs: the bytes of the rank that needs the most for N microbatches' worth of its own
activations (static + floor(N x its activations per microbatch)), so every rank can hold N
of its own and none is held to less than the plan's limit says; with both forms, the
smaller count. The activation budget the schedule searches work with (list scheduler,
W filling, CP-SAT) is that count less each rank's static bytes (``activation_limit``), so a
schedule within the budget is exactly one the validator accepts (``fits``).

Any schedule needs, on each rank, its static bytes plus one microbatch in flight on
every stage it holds (a microbatch's forward keeps its activations until its
input-gradient, which needs every later stage's forward first); below that no order
fits and ``check_minimum`` says how much is needed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from planner.core.errors import InfeasibleError, InputError
from planner.core.stage_costs import StageCosts
from planner.core.units import format_bytes

__all__ = ["MemoryLimit", "parse_memory_limit", "rank_activation"]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
"""Byte units; ``mb`` means microbatches here (write MiB for megabytes)."""
_TEXT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def rank_activation(costs: StageCosts) -> list[int]:
    """Activation bytes one microbatch leaves on each rank (all of its stages there)."""
    out = [0] * costs.num_ranks
    for s, r in enumerate(costs.ranks):
        out[r] += costs.act_bytes[s]
    return out


@dataclass(frozen=True, kw_only=True)
class MemoryLimit:
    """A memory limit: bytes per GPU, microbatches of activations, or both (the smaller byte
    count); checked by [Note: one memory rule]."""

    bytes: int | None = None
    """Bytes per GPU, static bytes included."""
    microbatches: float | None = None
    """Activation budget per rank, in microbatches' worth of that rank's activations."""
    rank_bytes: tuple[int, ...] = ()
    """Mixed fleets: each pipeline rank's own byte cap (its device group's memory), on top of
    the others; empty: the same cap on every rank."""

    def __str__(self) -> str:
        parts = [] if self.bytes is None else [format_bytes(self.bytes)]
        return " and ".join(parts + ([] if self.microbatches is None else [f"{self.microbatches:g}mb"]))

    def per_gpu_bytes(self, costs: StageCosts) -> int:
        """The limit as the validator checks it: one byte count per GPU for ``costs``."""
        caps = [] if self.bytes is None else [self.bytes]
        if self.microbatches is not None:
            act = rank_activation(costs)
            caps.append(max(s + int(self.microbatches * a) for s, a in zip(costs.static_per_rank(), act)))
        return min(caps)

    def per_rank_bytes(self, costs: StageCosts) -> list[int]:
        """Each rank's byte cap: ``per_gpu_bytes``, lowered to its ``rank_bytes`` where given."""
        cap = self.per_gpu_bytes(costs) if self.bytes is not None or self.microbatches is not None else None
        if not self.rank_bytes:
            return [cap] * costs.num_ranks  # type: ignore[list-item]
        return [r if cap is None else min(cap, r) for r in self.rank_bytes]

    def activation_limit(self, costs: StageCosts) -> list[int]:
        """Activation bytes each rank may hold: its cap (``per_rank_bytes``) less its static bytes."""
        return [cap - s for cap, s in zip(self.per_rank_bytes(costs), costs.static_per_rank())]

    def fits(self, costs: StageCosts, peak_memory_bytes: list[int]) -> bool:
        """Whether simulated per-rank peaks (static + activations) are within the limit."""
        if not self.rank_bytes:
            return max(peak_memory_bytes, default=0) <= self.per_gpu_bytes(costs)
        return all(p <= cap for p, cap in zip(peak_memory_bytes, self.per_rank_bytes(costs)))

    def check_minimum(self, costs: StageCosts) -> None:
        """Raise ``InfeasibleError`` when a rank cannot hold one microbatch per stage."""
        act, static = rank_activation(costs), costs.static_per_rank()
        for r, allowed in enumerate(self.activation_limit(costs)):
            if allowed < act[r]:
                need = static[r] + act[r]
                raise InfeasibleError(
                    f"memory limit {self} is below what any schedule needs on rank {r}: "
                    f"{format_bytes(need)} ({format_bytes(static[r])} static + {format_bytes(act[r])} "
                    f"for one microbatch in flight per stage); raise --memory-limit to at least "
                    f"{format_bytes(need, up=True).replace(' ', '')} (or 1mb), or raise pp")


_MICROBATCH_UNITS = ("microbatches", "microbatch", "mb")
"""Spellings of the microbatch unit: ``4microbatches`` as ``ppplan plan`` documents it, ``4mb`` as before."""


def parse_memory_limit(text: str, *, field: str = "--memory-limit") -> MemoryLimit:
    """``80GiB``, ``80GB``, ``8.5e10`` (bytes) or ``4microbatches``/``4mb`` (microbatches);
    ``InputError`` otherwise. ``planner.api.plan(memory_limit=...)`` reads it as the CLI does."""
    m = _TEXT.match(text)
    unit = m.group(2).lower() if m else ""
    if m and unit in _MICROBATCH_UNITS:
        value = float(m.group(1))
        if not math.isfinite(value):
            raise InputError(field, f"{text!r} is too large", "give microbatches in flight, e.g. 4mb")
        if value < 1:
            raise InputError(field, f"{text!r} is below one microbatch in flight per stage",
                             "use at least 1mb")
        return MemoryLimit(microbatches=value)
    if not m or unit not in _UNITS:
        raise InputError(field, f"cannot read {text!r}",
                         "write bytes (8.5e10), GiB/GB (80GiB) or microbatches of activations (4mb)")
    value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value >= 2**63:
        raise InputError(field, f"{text!r} is too large", "give a size per GPU, e.g. 80GiB")
    if value <= 0:
        raise InputError(field, f"{text!r} must be positive", "give a positive size")
    return MemoryLimit(bytes=int(value))
