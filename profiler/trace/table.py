"""A cost table from traces (``ppplan profile --from-trace``): the layers' F, I, W, B and
all-to-all times measured in the user's run, every other field from the analytical model
of the same model, and the provenance of each field in ``meta.trace.provenance``.

Per layer type (``LayerSpec.type_key``), over every sample of every rank and step:

- ``f``, ``i``, ``w``, ``b``: medians of the ranges' compute ([Note: median] below). A run
  that backpropagates in one pass (B only: Megatron's 1F1B, a plain ``loss.backward()``)
  has ``b`` measured and ``i``/``w`` split from it by the analytical model's I:W ratio;
- ``a2a_f``, ``a2a_b``: medians of the exposed all-to-all (its time less the part hidden
  under computation); the hidden share itself, per type and phase, is in
  ``meta.trace.hidden_share``;
- pairs: the median fused-pair range where the run fused pairs (``ppplan/pair/...``);
  otherwise the analytical model's ``OV / serial`` applied to the measured serial times;
- memory, FLOPs, P2P: the analytical model (bytes at the run's width).

[Note: median] The median of a type's samples, as the measured profiler takes the median
of its repeats (``profiler.timing``), so one descheduled microbatch does not move a cost.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import replace

from planner.core.costs import CostTable, LayerCost
from planner.core.errors import InputError
from profiler.trace.attribute import RankFacts, WorkSample, rank_facts
from profiler.trace.names import LOSS_KIND, WORK_KINDS
from profiler.trace.read import RankTrace, read_traces

__all__ = ["read_run", "costs_from_trace", "trace_facts"]

_TIMES = ("f", "i", "w", "b", "a2a_f", "a2a_b")
TRACE = "trace"
"""Provenance of a time read from the trace as it stands (a device clock, or no calibration)."""
TRACE_LESS_OVERHEAD = "trace less the profiler's own cost"
"""Provenance of a host-clock time with the profiler's measured per-event cost taken out
(``profiler.trace.overhead``)."""


def read_run(folder: str) -> tuple[list[RankTrace], dict]:
    """The traces of ``folder`` and the run shape the first of them recorded (may be empty)."""
    traces = read_traces(folder)
    return traces, next((t.run for t in traces if t.run), {})


def trace_facts(traces: list[RankTrace], folder: str) -> list[RankFacts]:
    """Each rank's samples; ``InputError`` when no trace holds a ppplan range."""
    facts = [rank_facts(t) for t in traces]
    if not any(f.work for f in facts):
        raise InputError("--from-trace", f"{folder} has no ppplan/<F|I|W|B>/<layer>/<type> ranges",
                         "record with ppplan replay --torch-profile or examples/trace_hook.py "
                         "(docs/trace-import.md)")
    return facts


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _type_times(samples: list[WorkSample], fill: LayerCost, src: str = TRACE) -> tuple[dict, dict, dict]:
    """(times, provenance, hidden share) of one layer type from its samples; ``src`` is the
    provenance of a time read from the trace."""
    by_kind: dict[str, list[WorkSample]] = defaultdict(list)
    for s in samples:
        by_kind[s.kind].append(s)
    times, prov = {"f": _median([s.compute_s for s in by_kind["F"]])}, {"f": src}
    if by_kind[LOSS_KIND]:  # the loss on this layer's output, outside its F range (profiler.trace.names)
        times["f"] += _median([s.compute_s for s in by_kind[LOSS_KIND]])
        prov["f"] = f"{src}; with the loss"
    back = by_kind["I"] + by_kind["B"]
    if by_kind["I"] and by_kind["W"]:
        times["i"], times["w"] = _median([s.compute_s for s in by_kind["I"]]), _median([s.compute_s for s in by_kind["W"]])
        prov["i"] = prov["w"] = src
    else:
        b = _median([s.compute_s for s in by_kind["B"]])
        share = fill.i / (fill.i + fill.w) if fill.i + fill.w > 0 else 0.5
        times["i"], times["w"] = b * share, b * (1 - share)
        prov["i"] = prov["w"] = f"{src}; B split by the analytical I:W ratio"
    if by_kind["B"]:
        times["b"], prov["b"] = _median([s.compute_s for s in by_kind["B"]]), src
    else:
        times["b"], prov["b"] = None, "i + w"
    times["a2a_f"] = _median([s.a2a_s - s.hidden_s for s in by_kind["F"]])
    times["a2a_b"] = _median([s.a2a_s - s.hidden_s for s in back])
    prov["a2a_f"] = prov["a2a_b"] = f"{src} (exposed: all-to-all less its hidden part)"
    hidden = {}
    for phase, group in (("F", by_kind["F"]), ("B", back)):
        total = sum(s.a2a_s for s in group)
        if total > 0:
            hidden[phase] = sum(s.hidden_s for s in group) / total
    return times, prov, hidden


def _samples_by_type(facts: list[RankFacts], fill: CostTable) -> dict[str, list[WorkSample]]:
    by_type: dict[str, list[WorkSample]] = defaultdict(list)
    for f in facts:
        for s in f.work:
            by_type[s.type].append(s)
    types = {lc.type for lc in fill.layers}
    for t, samples in by_type.items():
        if t not in types:
            raise InputError("--from-trace", f"layer type {t!r} of the trace is not one of the model's "
                             f"({', '.join(sorted(types))})", "pass the --model the run trained")
    for lc in fill.layers:
        kinds = {s.kind for s in by_type.get(lc.type, [])}
        if "F" not in kinds or not ("B" in kinds or {"I", "W"} <= kinds):
            raise InputError("--from-trace", f"no F and B (or I and W) ranges of layer type {lc.type!r} in the "
                             "trace", "trace every pipeline rank, and a step with forward and backward")
    return by_type


def costs_from_trace(facts: list[RankFacts], fill: CostTable, *, folder: str, run: dict) -> CostTable:
    """The cost table of the traced run; ``fill`` is the analytical table of the same model at
    the run's width and microbatch shape (its fields stand where the trace has none)."""
    by_type = _samples_by_type(facts, fill)
    corrected = [f for f in facts if f.overhead_s_per_event is not None]
    src = TRACE_LESS_OVERHEAD if corrected else TRACE
    per_type = {t: _type_times(by_type[t], next(lc for lc in fill.layers if lc.type == t), src)
                for t in {lc.type for lc in fill.layers}}
    layers = tuple(replace(lc, **per_type[lc.type][0]) for lc in fill.layers)
    pairs, pair_prov = _pairs(facts, fill, layers)
    provenance = {t: dict(p, **{k: "analytical" for k in ("act_bytes", "param_bytes", "flops", "p2p")})
                  for t, (_, p, _) in per_type.items()}
    meta = {"trace": {
        "folder": folder, "ranks": len(facts), "clock": sorted({f.clock for f in facts}),
        "samples": {t: {k: sum(1 for s in by_type[t] if s.kind == k) for k in (*WORK_KINDS, LOSS_KIND)}
                    for t in sorted(by_type)},
        "hidden_share": {t: h for t, (_, _, h) in sorted(per_type.items()) if h},
        "comm_comp_overlap": {str(f.rank): f.comm_comp_overlap for f in facts if f.comm_comp_overlap is not None},
        "profiler_overhead_s_per_event": {str(f.rank): f.overhead_s_per_event for f in corrected},
        "provenance": {"layers": provenance, "pairs": pair_prov},
        "run": run}, "fill": {"source": fill.source, "device": fill.device}}
    return replace(fill, source="measured", layers=layers, pairs=pairs,
                   device=f"{fill.device} (times: trace, {meta['trace']['clock'][0]} clock)", meta=meta)


def _pairs(facts: list[RankFacts], fill: CostTable, layers: tuple[LayerCost, ...]) -> tuple[dict, dict]:
    """Fused pairs measured where they ran, else the analytical hidden share on measured times."""
    measured: dict[tuple[str, str], list[float]] = defaultdict(list)
    for f in facts:
        for p in f.pairs:
            measured[(p.f_type, p.b_type)].append(p.seconds)
    cost = {lc.type: lc for lc in layers}
    fill_cost = {lc.type: lc for lc in fill.layers}
    pairs, prov = {}, {}
    for (a, b), ov in fill.pairs.items():
        serial = fill_cost[a].serial_f + fill_cost[b].serial_i
        pairs[(a, b)] = ov / serial * (cost[a].serial_f + cost[b].serial_i) if serial > 0 else ov
        prov[f"{a} / {b}"] = "analytical OV/serial x trace serial"
    for key, values in measured.items():
        if key[0] in cost and key[1] in cost:
            pairs[key] = _median(values)
            prov[f"{key[0]} / {key[1]}"] = "trace"
    return pairs, prov
