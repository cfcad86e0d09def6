"""Memory limits for schedules: bytes per GPU, or microbatches' worth of activations.

``--memory-limit`` accepts ``80GiB``, ``80GB``, ``8.5e10`` (bytes per GPU: parameters,
gradients, optimizer state and activations together) or ``4mb`` (activations only:
each rank may hold 4 microbatches' worth of the activations its stages keep, the unit
the zero-bubble papers use: 1F1B needs p, ZB-H2 2p - 1). Either form turns into an
activation budget per rank for a given set of stage costs.

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
    """A per-rank memory limit: bytes per GPU, microbatches of activations, or both (the
    tighter one counts on each rank)."""

    bytes: int | None = None
    """Bytes per GPU, static bytes included."""
    microbatches: float | None = None
    """Activation budget per rank, in microbatches' worth of that rank's activations."""

    def __str__(self) -> str:
        parts = [] if self.bytes is None else [f"{self.bytes / 2**30:.2f} GiB"]
        return " and ".join(parts + ([] if self.microbatches is None else [f"{self.microbatches:g}mb"]))

    def act_budget(self, costs: StageCosts) -> list[int]:
        """Activation bytes each rank may hold."""
        act, static = rank_activation(costs), costs.static_per_rank()
        out = []
        for r in range(costs.num_ranks):
            caps = [] if self.bytes is None else [self.bytes - static[r]]
            caps += [] if self.microbatches is None else [int(self.microbatches * act[r])]
            out.append(min(caps))
        return out

    def per_gpu_bytes(self, costs: StageCosts) -> int:
        """The limit as one byte count per GPU (the largest rank's static + budget)."""
        return max(s + b for s, b in zip(costs.static_per_rank(), self.act_budget(costs)))

    def check_minimum(self, costs: StageCosts) -> None:
        """Raise ``InfeasibleError`` when a rank cannot hold one microbatch per stage."""
        act, static = rank_activation(costs), costs.static_per_rank()
        for r, budget in enumerate(self.act_budget(costs)):
            if budget < act[r]:
                need = static[r] + act[r]
                raise InfeasibleError(
                    f"memory limit {self} is below what any schedule needs on rank {r}: "
                    f"{need / 2**30:.2f} GiB ({static[r] / 2**30:.2f} GiB static + "
                    f"{act[r] / 2**30:.2f} GiB for one microbatch in flight per stage); "
                    f"raise --memory-limit to at least {need / 2**30:.2f}GiB (or 1mb), or raise pp")


def parse_memory_limit(text: str, *, field: str = "--memory-limit") -> MemoryLimit:
    """``80GiB``, ``80GB``, ``8.5e10`` (bytes) or ``4mb`` (microbatches); ``InputError`` otherwise."""
    m = _TEXT.match(text)
    unit = m.group(2).lower() if m else ""
    if m and unit == "mb":
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
