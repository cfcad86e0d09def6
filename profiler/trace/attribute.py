"""Attribute one rank's trace to layers: each ``ppplan/...`` range (``profiler.trace.names``)
becomes a sample of its layer's compute, all-to-all and hidden all-to-all time.

Two clocks, chosen by what the trace holds:

- **device** (the trace has GPU events, ``args.stream``): a range owns the kernels whose
  launch (the CUDA runtime event with the kernel's ``correlation``) starts inside it on
  the same process, any thread (the backward's launches come from autograd's device
  thread). Compute is the union of its computation kernels, all-to-all the union of its
  communication kernels (HTA's classifier, ``profiler.trace.intervals``), hidden the part
  of that communication during which any computation kernel of the rank runs;
- **host** (CPU-only traces, gloo): a work range's compute is its length minus its nested
  ``ppplan/a2a/...`` ranges; the all-to-all is their length, hidden the part of it during
  which another thread of the process runs compute (a fused pair's other half). Both less the
  profiler's own cost where the trace measured it (``profiler.trace.overhead``): the cost of
  one recorded event times the events recorded inside (on the range's thread).

An all-to-all belongs to the forward (F) or the backward (its enclosing I or B range).

[Note: complete steps] As HTA does (``hta/common/trace.py``, ``_filter_irrelevant_gpu_kernels``),
a trace with two or more ``ProfilerStep#N`` ranges is cut before the last one starts (the
last step is often cut off by the profiler's stop): host events that start before it, and
the device events they launched.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import defaultdict
from typing import Callable
from dataclasses import dataclass, replace

from profiler.trace.intervals import Interval, comm_comp_overlap, kernel_kind, length, merge, overlap
from profiler.trace.names import CALIBRATION_RANGE, TraceRange, parse_range
from profiler.trace.overhead import per_event_seconds
from profiler.trace.read import Event, RankTrace

__all__ = ["WorkSample", "PairSample", "RankFacts", "rank_facts", "complete_steps"]

_US = 1e-6
_STEP = re.compile(r"ProfilerStep\s*#\s*\d+$")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


@dataclass(frozen=True, kw_only=True)
class WorkSample:
    """One layer's one F, I, W or B in the trace, seconds."""

    type: str
    kind: str
    index: int
    compute_s: float
    a2a_s: float = 0.0
    """All-to-all time inside the range (dispatch + combine, or their gradients)."""
    hidden_s: float = 0.0
    """Part of ``a2a_s`` with computation running beside it."""


@dataclass(frozen=True, kw_only=True)
class PairSample:
    """One fused pair's time, seconds."""

    f_type: str
    b_type: str
    seconds: float


@dataclass(frozen=True, kw_only=True)
class RankFacts:
    """What one rank's trace says."""

    rank: int
    clock: str
    """device or host (see the module docstring)."""
    work: tuple[WorkSample, ...]
    pairs: tuple[PairSample, ...]
    comm_comp_overlap: float | None
    """Whole-trace share of communication kernel time overlapped by computation (HTA's
    ``get_comm_comp_overlap`` per rank); None on a host clock."""
    comm_s: float
    """Merged communication time of the whole trace (kernels, or ``a2a`` ranges on a host clock)."""
    overhead_s_per_event: float | None = None
    """Host clock: what one recorded event cost in this process (``profiler.trace.overhead``),
    taken out of every sample; None: not measured (device clock, or a trace without calibration)."""


def _ranges(trace: RankTrace) -> list[tuple[TraceRange, Event]]:
    out = []
    for e in trace.events:
        if e.stream is None and e.cat != "gpu_user_annotation":
            r = parse_range(e.name)
            if r is not None:
                out.append((r, e))
    return out


def _inside(outer: Event, inner: Event) -> bool:
    return outer.pid == inner.pid and outer.tid == inner.tid and outer.ts <= inner.ts and inner.end <= outer.end


def _event_counter(trace: RankTrace) -> Callable[[Event], int]:
    """Events recorded inside a host range on its own thread (itself not counted)."""
    starts: dict[tuple, list[float]] = defaultdict(list)
    for e in trace.events:
        if e.stream is None:
            starts[(e.pid, e.tid)].append(e.ts)
    for ts in starts.values():
        ts.sort()

    def count(rng: Event) -> int:
        ts = starts[(rng.pid, rng.tid)]
        return max(0, bisect_left(ts, rng.end) - bisect_left(ts, rng.ts) - 1)
    return count


def _host_facts(trace: RankTrace, ranges: list[tuple[TraceRange, Event]], compensate: bool) -> RankFacts:
    count = _event_counter(trace)
    cost = per_event_seconds([(e.dur, count(e)) for e in trace.events
                              if e.stream is None and e.name == CALIBRATION_RANGE], trace.run) if compensate else None
    per_event = cost or 0.0
    a2a = [e for r, e in ranges if r.what == "a2a"]
    work = [(r, e, [a for a in a2a if _inside(e, a)]) for r, e in ranges if r.what == "work"]
    compute_by_thread: dict[tuple, list[Interval]] = defaultdict(list)
    for _, e, comm in work:
        compute_by_thread[(e.pid, e.tid)].extend(_minus((e.ts, e.end), [(a.ts, a.end) for a in comm]))
    samples = []
    for r, e, comm_events in work:
        comm = [(a.ts, a.end) for a in comm_events]
        others = [iv for key, ivs in compute_by_thread.items() if key[0] == e.pid and key != (e.pid, e.tid)
                  for iv in ivs]
        comm_n = sum(count(a) + 1 for a in comm_events)
        comm_s = max(0.0, length(comm) * _US - per_event * comm_n)
        compute_s = max(0.0, (e.dur - length(comm)) * _US - per_event * (count(e) - comm_n))
        samples.append(WorkSample(type=r.type, kind=r.kind, index=r.index, compute_s=compute_s, a2a_s=comm_s,
                                  hidden_s=min(comm_s, overlap(comm, others) * _US)))
    pairs = [PairSample(f_type=r.type, b_type=r.b_type, seconds=max(0.0, e.dur * _US - per_event * count(e)))
             for r, e in ranges if r.what == "pair"]
    return RankFacts(rank=trace.rank, clock="host", work=tuple(samples), pairs=tuple(pairs), comm_comp_overlap=None,
                     comm_s=length((a.ts, a.end) for a in a2a) * _US, overhead_s_per_event=cost)


def _minus(span: Interval, holes: list[Interval]) -> list[Interval]:
    """``span`` without ``holes``."""
    out, cursor = [], span[0]
    for a, b in merge(holes):
        if a > cursor:
            out.append((cursor, min(a, span[1])))
        cursor = max(cursor, b)
    if cursor < span[1]:
        out.append((cursor, span[1]))
    return out


def _device_facts(trace: RankTrace, ranges: list[tuple[TraceRange, Event]]) -> RankFacts:
    kernels = [e for e in trace.events if e.stream is not None and e.cat != "gpu_user_annotation"]
    kinds = {name: kernel_kind(name) for name in {k.name for k in kernels}}
    comm_all = [(k.ts, k.end) for k in kernels if kinds[k.name] == "COMMUNICATION"]
    comp_all = [(k.ts, k.end) for k in kernels if kinds[k.name] == "COMPUTATION"]
    by_corr = {k.correlation: k for k in kernels if k.correlation is not None}
    launches = [(e, by_corr[e.correlation]) for e in trace.events
                if e.cat in _LAUNCH_CATS and e.correlation in by_corr]

    def owned(rng: Event) -> list[Event]:
        return [k for launch, k in launches if launch.pid == rng.pid and rng.ts <= launch.ts <= rng.end]

    samples, pairs = [], []
    for r, e in ranges:
        ks = owned(e)
        comm = [(k.ts, k.end) for k in ks if kinds[k.name] == "COMMUNICATION"]
        comp = [(k.ts, k.end) for k in ks if kinds[k.name] == "COMPUTATION"]
        if r.what == "work":
            samples.append(WorkSample(type=r.type, kind=r.kind, index=r.index, compute_s=length(comp) * _US,
                                      a2a_s=length(comm) * _US, hidden_s=overlap(comm, comp_all) * _US))
        elif r.what == "pair":
            pairs.append(PairSample(f_type=r.type, b_type=r.b_type, seconds=length(comm + comp) * _US))
    return RankFacts(rank=trace.rank, clock="device", work=tuple(samples), pairs=tuple(pairs),
                     comm_comp_overlap=comm_comp_overlap(comm_all, comp_all), comm_s=length(comm_all) * _US)


def complete_steps(trace: RankTrace) -> RankTrace:
    """The trace without its last profiler step ([Note: complete steps])."""
    starts = [e.ts for e in trace.events if e.stream is None and _STEP.match(e.name)]
    if len(starts) < 2:
        return trace
    cut = max(starts)
    host = [e for e in trace.events if e.stream is None and e.ts < cut]
    launched = {e.correlation for e in host if e.correlation is not None}
    device = [e for e in trace.events if e.stream is not None and e.correlation in launched]
    return replace(trace, events=tuple(host + device))


def rank_facts(trace: RankTrace, *, compensate: bool = True) -> RankFacts:
    """The samples of one rank's trace (device clock when it has GPU events, else host);
    ``compensate=False`` keeps a host clock's times as recorded (the profiler's cost in them)."""
    trace = complete_steps(trace)
    ranges = _ranges(trace)
    if any(e.stream is not None for e in trace.events):
        return _device_facts(trace, ranges)
    return _host_facts(trace, ranges, compensate)
