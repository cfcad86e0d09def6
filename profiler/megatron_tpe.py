"""Read the tokens-per-expert logs Megatron-LM writes, one ``rank<R>.jsonl`` per global rank.

Megatron-LM ``megatron/training/activation_logging.py`` (``ActivationLogger.save_tpe``,
``--save-tokens-per-expert-interval N``) logs, per rank, each MoE layer's token counts of
the rank's local experts, one row per forward call. ppplan maps ranks, local layers and
local experts to the plan's global ones through the plan's layout (``TpeLayout``, built
by ``planner.replanning.megatron_layout``); the format and the mapping are in
docs/replan.md ("Routing traces").

[Note: rows per microbatch] a record holds M rows, or 2M when recomputation re-runs each
forward; the rows are summed and divided by the forward calls per microbatch.

[Note: virtual stages] with virtual stages one record merges the rows of a rank's chunks
that share a local index; ``_split_rows`` splits them by Megatron's schedule order.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.core.limits import MAX_TOKEN_COUNT
from planner.core.model import ModelSpec
from planner.core.reader import MAX_TRACE_BYTES, read_input_text
from profiler.json_lines import json_records

__all__ = ["RankCoords", "TpeLayout", "TpeKey", "read_megatron", "rank_files", "is_megatron_log",
           "RANK_FILE"]

RANK_FILE = re.compile(r"rank(\d+)\.jsonl")
"""File name ``save_tpe`` writes for global rank R."""

TpeKey = tuple[str, int, int]
"""(block, mtp_idx or -1 for decoder, layer): what one record is keyed by on its rank."""

_Records = dict[tuple[int, int], list[float]]


@dataclass(frozen=True, kw_only=True)
class RankCoords:
    """Where one global rank sits in Megatron's expert-layer decomposition."""

    pp: int
    """Pipeline rank."""
    ep: int
    """Expert-parallel rank (which block of experts it holds)."""
    edp: int
    """Expert-data-parallel replica."""
    etp: int
    """Expert-tensor-parallel index (0 is counted, the others duplicate it)."""


@dataclass(frozen=True, kw_only=True)
class TpeLayout:
    """What the logs of one run must look like: ranks, local layers, rows per record."""

    world_size: int
    """Global ranks (pp x tp x cp x dp)."""
    describe: str
    """The run's degrees and rank order, for messages."""
    ranks: tuple[RankCoords, ...]
    """Coordinates of each global rank."""
    local_experts: int
    """Experts per expert-parallel rank (length of every ``tpe`` row)."""
    microbatches: int
    """Microbatches per step (M)."""
    forward_calls: tuple[tuple[int, int], ...]
    """(microbatch, chunk) of each forward on a rank, in order (Megatron's schedule table)."""
    recompute_calls: tuple[tuple[tuple[int, int], ...], ...]
    """Per pipeline rank: (microbatch, chunk) of each forward call, re-runs included, when every
    forward is recomputed before its backward (see [Note: virtual stages])."""
    moe_layers: tuple[dict[TpeKey, tuple[tuple[int, int], ...]], ...]
    """Per pipeline rank: key -> ((chunk, ModelSpec layer index), ...) of its MoE layers."""
    block_sizes: tuple[dict[str, int], ...]
    """Per pipeline rank: most decoder / mtp layers any of its chunks holds."""


def is_megatron_log(paths: list[Path]) -> bool:
    """A folder, or files all named ``rank<R>.jsonl``: Megatron's per-rank logs."""
    return bool(paths) and (any(p.is_dir() for p in paths) or all(RANK_FILE.fullmatch(p.name) for p in paths))


def rank_files(paths: list[Path], layout: TpeLayout) -> dict[int, Path]:
    """Global rank -> its log: a save folder, its ``tokens_per_expert`` folder, or the files."""
    found: dict[int, Path] = {}
    for path in paths:
        if path.is_dir():
            folder = path / "tokens_per_expert" if (path / "tokens_per_expert").is_dir() else path
            files = sorted(p for p in folder.iterdir() if RANK_FILE.fullmatch(p.name))
            if not files:
                raise InputError(str(path), "holds no rank<R>.jsonl files",
                                 "pass the folder Megatron's --save-tokens-per-expert-interval wrote")
        elif not path.exists():
            raise InputError(str(path), "no such file or folder", "check the path")
        elif not RANK_FILE.fullmatch(path.name):
            raise InputError(str(path), "is not named rank<R>.jsonl",
                             "Megatron logs are one rank<R>.jsonl per global rank R")
        else:
            files = [path]
        for file in files:
            rank = int(RANK_FILE.fullmatch(file.name).group(1))
            if rank >= layout.world_size:
                raise InputError(str(file), f"rank {rank} is beyond the plan's world size "
                                 f"{layout.world_size} ({layout.describe})",
                                 "pass the logs of the run this plan describes")
            if rank in found:
                raise InputError(str(file), f"rank {rank} given twice (also {found[rank]})")
            found[rank] = file
    expected = [r for r, c in enumerate(layout.ranks) if layout.moe_layers[c.pp]]
    missing = [r for r in expected if r not in found]
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        raise InputError(", ".join(map(str, paths)), f"no log for rank(s) {shown}: the plan implies "
                         f"{layout.world_size} ranks ({layout.describe}), {len(expected)} with MoE layers",
                         "pass every rank's rank<R>.jsonl, or the plan of the run that wrote them")
    return found


@dataclass(frozen=True, kw_only=True)
class _Rec:
    line: int
    """Line the record is on."""
    counts: tuple[tuple[float, ...], ...]
    """Per chunk holding the key (layout order): local-expert counts of the iteration."""


def read_megatron(paths: list[str | Path], model: ModelSpec, layout: TpeLayout) -> _Records:
    """(iteration, ModelSpec layer index) -> tokens per expert of the iteration, all ranks.

    Expert-parallel rank e holds global experts ``[e * n, (e + 1) * n)``, n = experts / EP
    (Megatron ``moe_layer.py``: ``local_expert_indices_offset = ep_rank * num_local_experts``).
    Ranks that differ only in their expert-tensor-parallel index see the same tokens (the
    dispatcher all-gathers over the ETP group): only ETP index 0 is counted and the others
    must agree with it; expert-data-parallel replicas route different tokens and are summed.
    """
    files = rank_files([Path(p) for p in paths], layout)
    per_rank = {rank: _read_rank(path, layout.ranks[rank].pp, model, layout) for rank, path in files.items()}
    _check_iterations(per_rank, files)
    peers = {(c.pp, c.ep, c.edp): r for r, c in enumerate(layout.ranks) if c.etp == 0}
    records: _Records = {}
    for rank, iters in sorted(per_rank.items()):
        c = layout.ranks[rank]
        if c.etp:
            _check_duplicate(rank, peers[(c.pp, c.ep, c.edp)], per_rank, files)
            continue
        lo = c.ep * layout.local_experts
        for it, recs in iters.items():
            for key, rec in recs.items():
                for (_, idx), counts in zip(layout.moe_layers[c.pp][key], rec.counts):
                    row = records.setdefault((it, idx), [0.0] * model.moe.num_experts)
                    for j, x in enumerate(counts):
                        row[lo + j] += x
    return records


def _read_rank(path: Path, pp: int, model: ModelSpec, layout: TpeLayout) -> dict[int, dict[TpeKey, _Rec]]:
    """One rank's log: iteration -> (block, MTP index, layer) -> its chunks' counts.

    A line is ``{"iter": I, "block": "decoder", "layer": L, "tpe": [[...], ...]}`` or, for
    MTP, ``{"iter": I, "block": "mtp", "mtp_idx": K, "layer": L, "tpe": ...}``. ``layer``
    comes from the module name ``decoder.layers.<L>.mlp.experts.linear_fc1``
    (``_parse_tpe_module_name``): the 0-based index within the rank's own decoder block,
    dense layers included, restarting at 0 on every pipeline rank; for MTP, ``K`` indexes
    the rank's MTP layers and ``L`` the layer inside one (0: ppplan models one per MTP
    depth). A rank with no MoE layer writes nothing. Each ``tpe`` row is the ``m_splits``
    the grouped expert GEMM received; under ``--fp8`` they are padded up to the FP8
    alignment (16 or 32, ``Fp8Padding`` in ``megatron/core/transformer/moe/experts.py``),
    read as logged: each expert is overstated by less than one alignment per microbatch.
    """
    text = read_input_text(path, what="routing trace", limit=MAX_TRACE_BYTES)
    out: dict[int, dict[TpeKey, _Rec]] = {}
    last = -1
    for lineno, where, rec in json_records(path, text, fix="one JSON object per line",
                                           fields="iter, block, layer and tpe"):
        it = _int(rec, "iter", where)
        if it < last:
            raise InputError(f"{where}: iter", f"iteration {it} comes after {last}",
                             "iterations must not decrease within a rank's log")
        last = it
        key = _key(rec, where)
        recs = out.setdefault(it, {})
        if key in recs:
            raise InputError(where, f"second record for iteration {it}, {_name(key)}",
                             "log each layer once per iteration")
        chunks = _chunks(key, pp, model, layout, where)
        recs[key] = _Rec(line=lineno, counts=_split_rows(rec.get("tpe"), chunks, layout, pp, where))
    if not out:
        raise InputError(f"{path}:1", "empty log (no records)", "pass the logs of a run that saved tokens per expert")
    expected = set(layout.moe_layers[pp])
    for it, recs in out.items():
        missing = sorted(expected - set(recs))
        if missing:
            line = min(r.line for r in recs.values())
            raise InputError(f"{path}:{line}: layer", f"iteration {it} has no record for {_name(missing[0])}"
                             f" (pipeline rank {pp} has {len(expected)} MoE layers)",
                             "pass complete logs (every MoE layer of the rank, every saved iteration)")
    return out


def _int(rec: dict[str, Any], key: str, where: str) -> int:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{where}: {key}", f"expected an integer >= 0, got {value!r}")
    return value


def _key(rec: dict[str, Any], where: str) -> TpeKey:
    block = rec.get("block")
    if block not in ("decoder", "mtp"):
        raise InputError(f"{where}: block", f"unknown {block!r}", "Megatron writes decoder or mtp")
    mtp_idx = _int(rec, "mtp_idx", where) if block == "mtp" else -1
    return block, mtp_idx, _int(rec, "layer", where)


def _name(key: TpeKey) -> str:
    block, mtp_idx, layer = key
    return f"decoder layer {layer}" if block == "decoder" else f"mtp layer {mtp_idx}.{layer}"


def _chunks(key: TpeKey, pp: int, model: ModelSpec, layout: TpeLayout, where: str) -> tuple[tuple[int, int], ...]:
    chunks = layout.moe_layers[pp].get(key)
    if chunks is not None:
        return chunks
    block, mtp_idx, layer = key
    size = layout.block_sizes[pp].get(block, 0)
    index = layer if block == "decoder" else mtp_idx
    if block == "mtp" and layer != 0:
        raise InputError(f"{where}: layer", f"mtp layer {mtp_idx} has inner layer {layer}",
                         f"ppplan models one transformer layer per MTP depth ({model.name})")
    if index >= size:
        raise InputError(f"{where}: {'layer' if block == 'decoder' else 'mtp_idx'}",
                         f"{_name(key)} is beyond pipeline rank {pp}'s {size} {block} layers in the plan",
                         "pass the plan of the run that wrote the logs (its stage layout)")
    raise InputError(f"{where}: layer", f"{_name(key)} of pipeline rank {pp} has no experts in the plan "
                     f"({model.name})", "pass the plan of the run that wrote the logs")


def _split_rows(tpe: Any, chunks: tuple[tuple[int, int], ...], layout: TpeLayout, pp: int, where: str
                ) -> tuple[tuple[float, ...], ...]:
    """Local-expert counts of the iteration per chunk (see [Note: rows per microbatch]).

    The re-run of a recomputed forward routes the same tokens, so the rows are summed and
    divided by the forward calls per microbatch: the layer's token count of the iteration,
    as in the single-file formats. [Note: virtual stages]: forwards run in Megatron's
    schedule-table order (``megatron/core/pipeline_parallel/schedules.py``,
    ``get_schedule_table``: groups of ``--microbatch-group-size-per-virtual-pipeline-stage``
    microbatches, chunk by chunk); with every forward recomputed (full recomputation, what
    ppplan exports) the re-runs come inside the backwards, which
    ``forward_backward_pipelining_with_interleaving`` runs after the rank's warm-up forwards
    ((pp - rank - 1) x 2 + (vpp - 1) x group, ``get_pp_rank_microbatches``) one per steady
    step, after that step's forward, backward k on chunk vpp - 1 - (the table's chunk k).
    Rows split by that order (M per chunk, or 2M with recomputation); any other row count
    is refused, since merged rows cannot then be told apart.
    """
    n = layout.local_experts
    if not isinstance(tpe, list) or not tpe or not all(isinstance(r, list) for r in tpe):
        raise InputError(f"{where}: tpe", "expected one row of local-expert token counts per forward call")
    for row in tpe:
        if len(row) != n:
            raise InputError(f"{where}: tpe", f"a row has {len(row)} counts, the rank holds {n} local experts",
                             f"pass the plan of the run (experts / EP = {n})")
        for x in row:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not \
                    0 <= x <= MAX_TOKEN_COUNT:
                raise InputError(f"{where}: tpe", f"{x!r:.40} is not a token count in 0..{MAX_TOKEN_COUNT:g}",
                                 "give the counts the router logged")
    m, rows = layout.microbatches, len(tpe)
    if len(chunks) == 1:
        if rows not in (m, 2 * m):
            raise InputError(f"{where}: tpe", f"{rows} rows, expected {m} (one per microbatch) or {2 * m}"
                             " (each forward re-run for recomputation)",
                             "save tokens per expert every N steps of the run this plan describes")
        return (tuple(sum(col) / (rows // m) for col in zip(*tpe)),)
    k = len(chunks)
    if rows not in (k * m, 2 * k * m):
        raise InputError(f"{where}: tpe", f"{rows} rows for a local index that {k} model chunks share, "
                         f"expected {k * m} (one per chunk and microbatch) or {2 * k * m} (every forward "
                         "recomputed); Megatron's log merges the chunks, other counts cannot be split",
                         "log with full recomputation or none, or without virtual stages")
    wanted = {c for c, _ in chunks}
    calls = layout.forward_calls if rows == k * m else layout.recompute_calls[pp]
    order = [c for _, c in calls if c in wanted]
    sums = {c: [0.0] * n for c in wanted}
    for chunk, row in zip(order, tpe):
        sums[chunk] = [a + b for a, b in zip(sums[chunk], row)]
    return tuple(tuple(x / (rows // (k * m)) for x in sums[c]) for c, _ in chunks)


def _check_iterations(per_rank: dict[int, dict[int, dict[TpeKey, _Rec]]], files: dict[int, Path]) -> None:
    """Every rank logged the same iterations (the most common set; the odd ones out are named)."""
    sets = Counter(frozenset(iters) for iters in per_rank.values())
    ref = max(sets, key=lambda s: (sets[s], sorted(s)))
    holder = {it: files[r] for r in sorted(per_rank, reverse=True) for it in per_rank[r]}
    for rank, iters in sorted(per_rank.items()):
        extra, lacking = sorted(set(iters) - ref), sorted(ref - set(iters))
        if extra:
            line = min(r.line for r in iters[extra[0]].values())
            raise InputError(f"{files[rank]}:{line}: iter", f"iteration {extra[0]} is not in the other logs "
                             f"(e.g. {files[min(r for r in per_rank if per_rank[r].keys() == ref)]})",
                             "pass logs of the same saved iterations from every rank")
        if lacking:
            raise InputError(f"{files[rank]}: iter", f"no records for iteration {lacking[0]}, which "
                             f"{holder[lacking[0]]} has", "pass logs of the same saved iterations from every rank")


def _check_duplicate(rank: int, peer: int, per_rank: dict[int, dict[int, dict[TpeKey, _Rec]]],
                     files: dict[int, Path]) -> None:
    """An expert-tensor-parallel rank logged what its ETP-index-0 peer logged."""
    for it, recs in per_rank[rank].items():
        for key, rec in recs.items():
            if per_rank[peer][it][key].counts != rec.counts:
                raise InputError(f"{files[rank]}:{rec.line}: tpe", f"iteration {it}, {_name(key)} differs "
                                 f"from rank {peer}, its expert-tensor-parallel peer, which routes the same "
                                 "tokens", "check --use-tp-pp-dp-mapping and that all logs come from one run")
