"""MoE routing traces: parse tokens-per-expert logs and measure per-layer imbalance.

Three formats (``fmt``; ``auto`` tells them apart, docs/replan.md "Routing traces"):
``megatron``, the per-rank logs Megatron-LM writes, read by ``profiler.megatron_tpe``
against the run's plan (only ``ppplan replan`` has one); ``jsonl``, ppplan's single-file
JSON lines; ``json``, one snapshot. Counts from several single files add up, so every
pipeline or data-parallel rank's trace can be passed together. Per MoE layer the
imbalance (busiest EP rank / mean, the factor ``profiler.analytical`` applies to expert
work and all-to-all volume) and MaxVio (Wang et al. 2024, arXiv:2408.15664) are averaged
over the last ``window`` iterations.

[Note: layer numbering] single-file traces number layers from 1 within their block, as
Megatron's ``TransformerLayer.layer_number``; decoder layer ``k`` is ModelSpec index ``k``
(the embedding is index 0).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.core.limits import MAX_TOKEN_COUNT
from planner.core.model import ModelSpec
from planner.core.reader import MAX_TRACE_BYTES, parse_json, read_input_text
from profiler.json_lines import json_records
from profiler.megatron_tpe import TpeLayout, is_megatron_log, read_megatron

__all__ = ["RoutingSummary", "load_routing", "routing_format", "rank_imbalance", "max_violation",
           "layer_factors", "BLOCKS", "FORMATS"]

FORMATS = ("auto", "megatron", "jsonl", "json")
"""Trace formats ``load_routing`` reads (see the module doc)."""

BLOCKS = ("decoder", "mtp")
"""Megatron block names a tokens-per-expert record may carry."""

_Records = dict[tuple[int, int], list[float]]
"""(iteration, ModelSpec layer index) -> tokens per expert, summed over files."""


@dataclass(frozen=True, kw_only=True)
class RoutingSummary:
    """Routing statistics of the MoE layers over a window of iterations."""

    tokens_per_expert: dict[int, list[float]]
    """ModelSpec layer index -> tokens per expert, summed over the window."""
    imbalance: dict[int, float]
    """ModelSpec layer index -> busiest EP rank load / mean (>= 1), mean over the window."""
    max_vio: dict[int, float]
    """ModelSpec layer index -> (max - mean) / mean of tokens per expert, mean over the window."""
    iterations: tuple[int, int]
    """First and last iteration of the window."""


def rank_imbalance(tokens: list[float], ep: int) -> float:
    """Busiest EP rank's load / mean load, experts assigned contiguously (>= 1)."""
    per = len(tokens) // ep
    loads = [sum(tokens[r * per:(r + 1) * per]) for r in range(ep)]
    mean = sum(loads) / ep
    return max(loads) / mean if mean > 0 else 1.0


def max_violation(tokens: list[float]) -> float:
    """MaxVio: (max - mean) / mean of tokens per expert (0 = perfectly balanced)."""
    mean = sum(tokens) / len(tokens)
    return (max(tokens) - mean) / mean if mean > 0 else 0.0


def layer_factors(summary: RoutingSummary, model: ModelSpec) -> list[float]:
    """One imbalance factor per ModelSpec layer (1.0 for layers without experts)."""
    out = [1.0] * model.num_layers
    for idx, value in summary.imbalance.items():
        out[idx] = max(1.0, value)
    return out


def load_routing(paths: list[str | Path], model: ModelSpec, *, ep: int, window: int | None = None,
                 fmt: str = "auto", layout: TpeLayout | None = None) -> RoutingSummary:
    """Read routing traces for ``model`` at expert-parallel degree ``ep``.

    ``fmt`` is one of ``FORMATS``; Megatron's per-rank logs need the run's ``layout``.
    Every MoE layer must have counts in the window; any malformed record is an
    ``InputError`` naming the file and line.
    """
    if model.moe is None:
        raise InputError("model", f"{model.name} has no MoE layers", "routing traces need an MoE model")
    if ep < 1 or model.moe.num_experts % ep:
        raise InputError("ep", f"{ep} does not divide {model.moe.num_experts} experts",
                         "use the expert-parallel degree of the run")
    if window is not None and window < 1:
        raise InputError("--window", f"must be >= 1, got {window}")
    if not paths:
        raise InputError("--routing", "no trace given", "pass at least one trace file")
    kind = routing_format(paths, fmt)
    records: _Records = {}
    if kind == "megatron":
        if layout is None:
            raise InputError("--routing", "Megatron's per-rank tokens-per-expert logs need the plan of the run",
                             "read them with ppplan replan PLAN --routing FOLDER")
        records = read_megatron(list(paths), model, layout)
    else:
        for path in paths:
            _read_file(Path(path), model, ep, records, kind)
    return _summarise(records, model, ep, window, [str(p) for p in paths])


def routing_format(paths: list[str | Path], fmt: str = "auto") -> str:
    """``megatron``, ``jsonl``, ``json``, or ``single-file`` (each file tells ``jsonl`` from ``json``)."""
    if fmt not in FORMATS:
        raise InputError("--routing-format", f"unknown {fmt!r}", f"use one of {', '.join(FORMATS)}")
    files = [Path(p) for p in paths]
    if fmt != "megatron" and any(p.is_dir() for p in files):
        if fmt != "auto":
            raise InputError("--routing", f"a folder is a Megatron log, not {fmt}", "pass --routing-format megatron")
        return "megatron"
    if fmt == "auto":
        return "megatron" if is_megatron_log(files) else "single-file"
    return fmt


def _read_file(path: Path, model: ModelSpec, ep: int, records: _Records, kind: str) -> None:
    text = read_input_text(path, what="routing trace", limit=MAX_TRACE_BYTES)
    if not text.strip():
        raise InputError(f"{path}:1", "empty trace", "pass a tokens-per-expert log with records")
    whole = _whole_json(path, text)
    plain = isinstance(whole, dict) and "layers" in whole
    if kind == "json" and not plain:
        raise InputError(f"{path}:1", "not a {\"layers\": ...} JSON object",
                         "pass --routing-format jsonl or megatron for JSON lines")
    if plain and kind != "jsonl":
        _read_plain(path, text, whole, model, ep, records)
    else:
        _read_lines(path, text, model, ep, records)


def _whole_json(path: Path, text: str) -> Any:
    """The file parsed as one JSON document, or None (JSON lines are not one; each line is
    then read, and refused, on its own)."""
    try:
        return parse_json(text, what="routing trace", source=str(path))
    except InputError:
        return None


def _read_lines(path: Path, text: str, model: ModelSpec, ep: int, records: _Records) -> None:
    """ppplan's JSON lines (what ppplan read before it read Megatron's own logs; kept so
    existing traces load): one record per iteration and layer with global numbering,
    ``{"iter": 100, "block": "decoder", "layer": 3, "tpe": [[128, 64], [96, 80]]}``;
    ``block`` is ``decoder`` (default) or ``mtp``, ``layer`` as [Note: layer numbering].
    """
    last_iter, seen = -1, set()
    for _, where, rec in json_records(path, text, fields="iter, layer and tpe",
                                      fix="one JSON object per line, or a plain {\"layers\": ...} file"):
        it = _int_field(rec, "iter", where, minimum=0)
        if it < last_iter:
            raise InputError(where, f"iteration {it} comes after {last_iter}",
                             "iterations must not decrease within a file")
        last_iter = it
        block = rec.get("block", "decoder")
        if block not in BLOCKS:
            raise InputError(f"{where}: block", f"unknown {block!r}", f"use one of {', '.join(BLOCKS)}")
        idx = _layer_index(model, block, _int_field(rec, "layer", where, minimum=None), where)
        if (it, idx) in seen:
            raise InputError(where, f"second record for iteration {it}, {block} layer {rec['layer']}",
                             "log each layer once per iteration")
        seen.add((it, idx))
        _add(records, (it, idx), _expert_counts(rec.get("tpe"), model, ep, where))
    if last_iter < 0:
        raise InputError(f"{path}:1", "empty trace (no records)", "pass a tokens-per-expert log with records")


def _read_plain(path: Path, text: str, data: dict[str, Any], model: ModelSpec, ep: int,
                records: _Records) -> None:
    """One snapshot ``{"layers": {"<layer>": [tokens per expert, ...]}, "iter": N}``: decoder
    layers 1..D, then MTP layers D+1.. (the ModelSpec index); ``iter`` defaults to 0."""
    it = _int_field(data, "iter", f"{path}:1", minimum=0) if "iter" in data else 0
    layers = data["layers"]
    if not isinstance(layers, dict) or not layers:
        raise InputError(f"{path}:{_line_of(text, 'layers')}: layers", "empty or not an object",
                         "map each MoE layer number to its tokens per expert")
    moe = [layer.index for layer in model.layers if layer.is_moe]
    if len(layers) != len(moe):
        raise InputError(f"{path}:{_line_of(text, 'layers')}: layers",
                         f"has {len(layers)} layers, model {model.name} has {len(moe)} MoE layers",
                         "give tokens per expert for every MoE layer")
    for key, counts in layers.items():
        where = f"{path}:{_line_of(text, key)}"
        try:
            number = int(key)
        except ValueError:
            raise InputError(f"{where}: layers.{key}", "layer key is not an integer",
                             "use the ModelSpec layer index (decoder layers 1..N, then MTP)") from None
        if not 1 <= number < model.num_layers or not model.layers[number].is_moe:
            raise InputError(f"{where}: layers.{key}", f"is not an MoE layer of {model.name}",
                             f"MoE layers are {moe[0]}..{moe[-1]}")
        _add(records, (it, number), _expert_counts([counts], model, ep, where))


def _int_field(rec: dict[str, Any], key: str, where: str, *, minimum: int | None) -> int:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: {key}", f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise InputError(f"{where}: {key}", f"must be >= {minimum}, got {value}")
    return value


def _layer_index(model: ModelSpec, block: str, number: int, where: str) -> int:
    """ModelSpec index of Megatron's 1-based ``number`` within ``block`` (see the module note)."""
    members = [layer for layer in model.layers if layer.role == block]
    if not 1 <= number <= len(members):
        raise InputError(f"{where}: layer", f"{block} layer {number} is not in 1..{len(members)}"
                         f" ({model.name})", "this format numbers layers from 1 in the whole model; read Megatron's own "
                         "per-rank logs (local indices from 0) as --routing-format megatron with the plan")
    layer = members[number - 1]
    if not layer.is_moe:
        raise InputError(f"{where}: layer", f"{block} layer {number} of {model.name} has no experts",
                         "trace only MoE layers")
    return layer.index


def _expert_counts(tpe: Any, model: ModelSpec, ep: int, where: str) -> list[float]:
    """Tokens per global expert from ``tpe``'s rows: one row per source rank with a count
    for every expert (summed), or ``ep`` rows of ``num_experts / ep`` counts, each EP rank's
    local experts in order (concatenated; experts sit on EP ranks contiguously, as
    Megatron's expert-parallel layout)."""
    experts = model.moe.num_experts
    if isinstance(tpe, list) and tpe and all(_is_number(x) for x in tpe):
        tpe = [tpe]
    if not isinstance(tpe, list) or not tpe or not all(isinstance(r, list) and r for r in tpe):
        raise InputError(f"{where}: tpe", "expected per-rank rows of tokens per expert")
    for row in tpe:
        for x in row:
            if not _is_number(x) or not math.isfinite(x):
                raise InputError(f"{where}: tpe", f"{x!r} is not a number")
            if x < 0:
                raise InputError(f"{where}: tpe", f"negative token count {x}", "counts must be >= 0")
            if x > MAX_TOKEN_COUNT:
                raise InputError(f"{where}: tpe", f"token count {x:.3g} is above the planner's limit of "
                                 f"{MAX_TOKEN_COUNT:g}", "give the counts the router logged")
    rows, cols = len(tpe), len(tpe[0])
    if any(len(r) != cols for r in tpe):
        raise InputError(f"{where}: tpe", "rows have different lengths")
    if cols == experts:
        return [float(sum(col)) for col in zip(*tpe)]
    if rows == ep and rows * cols == experts:
        return [float(x) for row in tpe for x in row]
    raise InputError(f"{where}: tpe", f"{rows} rows of {cols} counts do not match {experts} experts"
                     f" of {model.name}", f"give rows of {experts} counts per source rank, or {ep} rows"
                     f" of {experts // ep} (one per EP rank)")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _line_of(text: str, key: str) -> int:
    pos = text.find(f'"{key}"')
    return text.count("\n", 0, pos) + 1 if pos >= 0 else 1


def _add(records: _Records, key: tuple[int, int], counts: list[float]) -> None:
    if key in records:
        records[key] = [a + b for a, b in zip(records[key], counts)]
    else:
        records[key] = counts


def _summarise(records: _Records, model: ModelSpec, ep: int, window: int | None,
               names: list[str]) -> RoutingSummary:
    """Metrics of the last ``window`` distinct iterations, each computed from the counts of
    all files and averaged over the window (each step pays its own straggler; the ratio of
    the summed counts would understate it)."""
    iters = sorted({it for it, _ in records})
    kept = set(iters[-window:] if window is not None else iters)
    by_layer: dict[int, list[list[float]]] = defaultdict(list)
    for (it, idx), counts in sorted(records.items()):
        if it in kept:
            by_layer[idx].append(counts)
    moe = [layer.index for layer in model.layers if layer.is_moe]
    missing = [idx for idx in moe if idx not in by_layer]
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        raise InputError(", ".join(names), f"no counts for MoE layer(s) {shown} in iterations "
                         f"{min(kept)}..{max(kept)}", "trace every MoE layer (pass the logs of all "
                         "pipeline ranks) or widen --window")
    tpe, imb, vio = {}, {}, {}
    for idx in moe:
        snaps = by_layer[idx]
        empty = [s for s in snaps if sum(s) <= 0]
        if empty:
            raise InputError(", ".join(names), f"MoE layer {idx} has a record with no tokens",
                             "drop records of iterations that routed nothing")
        tpe[idx] = [sum(col) for col in zip(*snaps)]
        imb[idx] = sum(rank_imbalance(s, ep) for s in snaps) / len(snaps)
        vio[idx] = sum(max_violation(s) for s in snaps) / len(snaps)
    return RoutingSummary(tokens_per_expert=tpe, imbalance=imb, max_vio=vio,
                          iterations=(min(kept), max(kept)))
