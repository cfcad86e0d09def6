"""Interval arithmetic over trace events (microseconds): union and overlap lengths, and
the communication / computation split of device kernels.

The comm/compute overlap of a set of events is HTA's definition
(HolisticTraceAnalysis ``hta/analyzers/communication_analysis.py``, ``get_comm_comp_overlap``):
merge the communication kernels' intervals and the computation kernels' intervals
separately, and divide the time both are running by the merged communication time.
Kernels are classified by HTA's own ``hta.utils.utils.get_kernel_type`` (NCCL, memory and
compute name patterns), so a GPU trace needs the ``trace`` extra.
"""

from __future__ import annotations

from typing import Iterable

from planner.core.errors import InputError

__all__ = ["Interval", "merge", "length", "overlap", "kernel_kind", "comm_comp_overlap"]

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Disjoint sorted union of ``intervals``."""
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def length(intervals: Iterable[Interval]) -> float:
    """Total length of the union of ``intervals``."""
    return sum(b - a for a, b in merge(intervals))


def overlap(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """Length of (union of ``a``) intersected with (union of ``b``)."""
    ma, mb = merge(a), merge(b)
    total, j = 0.0, 0
    for start, end in ma:
        while j < len(mb) and mb[j][1] <= start:
            j += 1
        k = j
        while k < len(mb) and mb[k][0] < end:
            total += min(end, mb[k][1]) - max(start, mb[k][0])
            k += 1
    return total


def kernel_kind(name: str) -> str:
    """COMMUNICATION, MEMORY, COMPUTATION or OTHER, by HTA's classifier."""
    try:
        from hta.utils.utils import get_kernel_type
    except ImportError:
        raise InputError("--from-trace", "the trace has GPU kernels, whose classification needs "
                         "HolisticTraceAnalysis", "pip install 'ppplan[trace]'") from None
    return get_kernel_type(name)


def comm_comp_overlap(comm: Iterable[Interval], comp: Iterable[Interval]) -> float:
    """Share of the communication time with computation running (0 when there is none)."""
    comm = merge(comm)
    total = length(comm)
    return overlap(comm, comp) / total if total > 0 else 0.0
