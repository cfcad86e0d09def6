"""Which rank runs which stage: loop (interleaved) or V placement, and partitions."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PLACEMENTS", "Bounds", "stage_ranks", "check_bounds"]

PLACEMENTS = ("loop", "v")

Bounds = Sequence[tuple[int, int]]
"""A partition: the layer range ``[start, end)`` of each stage, in stage order. Solvers
build lists; a tuple of tuples where a partition is a dict key (the re-partitioning search)."""


def stage_ranks(num_stages: int, pp: int, style: str = "loop") -> list[int]:
    """Rank of each stage.

    loop: stage s on rank s % pp (Megatron interleaving, torch "loop" style).
    v: stages go down the ranks and back up: for vpp = 2, stage s < pp on rank s and
    stage s >= pp on rank 2pp-1-s (ZB-V, DualPipeV); larger vpp zig-zags.
    """
    if style == "loop":
        return [s % pp for s in range(num_stages)]
    if style == "v":
        return [(s % pp) if (s // pp) % 2 == 0 else pp - 1 - (s % pp) for s in range(num_stages)]
    raise ValueError(f"unknown placement {style!r}: use one of {', '.join(PLACEMENTS)}")


def check_bounds(bounds: Bounds, num_layers: int) -> None:
    """Stage layer ranges must be contiguous, non-empty, in order and cover all layers."""
    expect = 0
    for s, (a, b) in enumerate(bounds):
        if a != expect or b <= a:
            raise ValueError(f"stages[{s}].layers = [{a}, {b}]: expected to start at {expect}"
                             " and hold at least one layer")
        expect = b
    if expect != num_layers:
        raise ValueError(f"stages cover layers [0, {expect}) but the model has {num_layers}")
