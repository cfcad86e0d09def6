"""Microbatch counts to try (``--microbatches auto``) and the table each one implies.

A replica processes ``batch`` sequences per step; with M microbatches each holds
``batch / M`` sequences, so M must divide ``batch``. More microbatches shrink the
pipeline fill and drain (the bubble is about ``(S-1)/(M+S-1)`` of the step for 1F1B,
Narayanan et al. SC'21) but each microbatch runs less efficiently (smaller GEMMs,
fixed all-to-all latency): the cost table's ``size_curve`` gives the time of one
microbatch at each size, and ``CostTable.at_microbatch_size`` rescales the whole
table (times by that curve, activation and message bytes proportionally). Fewer
microbatches than stages leave ranks idle for most of the step, so counts below
``pp`` are tried only when the batch has no divisor >= pp.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.costs import CostTable
from planner.core.errors import InputError

__all__ = ["MicrobatchOption", "microbatch_options", "table_for"]


@dataclass(frozen=True, kw_only=True)
class MicrobatchOption:
    """One microbatch count to try."""

    count: int
    """Microbatches per step (M)."""
    size: int
    """Sequences per microbatch (batch / M)."""


def microbatch_options(batch: int, *, pp: int, max_options: int = 8) -> list[MicrobatchOption]:
    """Divisors M of ``batch`` (M >= pp when any exist), at most ``max_options`` of them,
    spread geometrically and always including the largest, ascending."""
    if batch < 1:
        raise InputError("--microbatches", f"auto needs a per-replica batch >= 1, got {batch}",
                         "raise --global-batch or lower --dp")
    divisors = [m for m in range(1, batch + 1) if batch % m == 0]
    counts = [m for m in divisors if m >= pp] or divisors
    if len(counts) > max_options:
        step = (len(counts) - 1) / (max_options - 1)
        counts = sorted({counts[round(k * step)] for k in range(max_options)})
    return [MicrobatchOption(count=m, size=batch // m) for m in counts]


def table_for(table: CostTable, option: MicrobatchOption) -> CostTable:
    """The cost table at ``option``'s microbatch size (per-microbatch efficiency included)."""
    return table.at_microbatch_size(option.size)
