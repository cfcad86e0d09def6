"""``ppplan plan`` options read into ``PlanRequest`` fields: the memory limit, the deadlines and
the microbatch count, each checked in one line naming its flag."""

from __future__ import annotations

from collections.abc import Sequence

from planner.core.errors import InputError
from solvers.schedule.engines.memory_limit import parse_memory_limit
from solvers.schedule.search.deadlines import parse_deadlines

__all__ = ["memory_options", "deadlines_for", "microbatch_count"]


def memory_options(memory_gib: float | None, memory_limit: str | None) -> tuple[int | None, float | None]:
    """``--memory-gib`` / ``--memory-limit`` to (bytes per GPU, microbatches of activations)."""
    if memory_limit is None:
        return (int(memory_gib * 2**30) if memory_gib is not None else None), None
    if memory_gib is not None:
        raise InputError("--memory-limit", "given together with --memory-gib", "pass only one of them")
    parsed = parse_memory_limit(memory_limit)
    return parsed.bytes, parsed.microbatches


def deadlines_for(items: Sequence[str], num_stages: int, microbatches: int | str | None) -> dict:
    """``--deadline TASK=SECONDS`` items to a deadline per task."""
    if not items:
        return {}
    if not isinstance(microbatches, int):
        raise InputError("--deadline", "needs a fixed --microbatches count", "pass --microbatches M")
    return parse_deadlines(list(items), num_stages=num_stages, microbatches=microbatches)


def microbatch_count(microbatches: int | str | None, default: int) -> tuple[int, bool]:
    """``--microbatches`` to (the count, whether ``auto`` searches the counts); ``default`` (the
    cluster's per-replica batch / micro-batch size) when not given or ``auto``."""
    auto = microbatches == "auto"
    if isinstance(microbatches, str) and not auto:
        raise InputError("--microbatches", f"expected a positive integer or auto, got {microbatches!r}")
    m = microbatches if microbatches is not None and not auto else default
    if m < 1:
        raise InputError("--microbatches", f"must be >= 1, got {m}")
    return m, auto
