"""Cost table JSON: load (schema + semantic checks), save. Format: planner/data/schemas/costs.schema.json."""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from planner.core.costs import CostFile, CostTable, LayerCost, P2PCost
from planner.core.errors import InputError
from planner.core.jsonio import write_json_atomic
from planner.core.model import ModelSpec
from planner.core.limits import MAX_TABLE_LAYERS, check_batch_value, check_cost_value
from planner.core.reader import parse_json, read_input_text
from planner.core.schemas import check_schema

__all__ = ["costs_to_dict", "costs_from_dict", "load_costs", "load_costs_for", "save_costs", "file_sha256"]

_INT_FIELDS = {"act_bytes", "act_w_bytes", "param_bytes", "grad_bytes", "optim_bytes", "work_bytes", "out_bytes"}


def costs_to_dict(table: CostTable) -> dict[str, Any]:
    """JSON-ready dict; pair entries carry serial time and hidden share for readers."""
    type_cost = {lc.type: lc for lc in table.layers}
    pairs = []
    for (fa, fb), ov in sorted(table.pairs.items()):
        serial = type_cost[fa].serial_f + type_cost[fb].serial_i if fa in type_cost and fb in type_cost else ov
        pairs.append({"f_type": fa, "b_type": fb, "ov": ov, "serial": serial,
                      "hidden_share": 1.0 - ov / serial if serial > 0 else 0.0})
    return {
        "schema_version": 1,
        "kind": "ppplan.costs",
        "model": table.model,
        "source": table.source,
        "device": table.device,
        "scale": table.scale,
        "microbatch_size": table.microbatch_size,
        "seq_len": table.seq_len,
        "p2p": asdict(table.p2p),
        "size_curve": [list(p) for p in table.size_curve],
        "layers": [_layer_dict(lc) for lc in table.layers],
        "pairs": pairs,
        "meta": table.meta,
    }


def _layer_dict(lc: LayerCost) -> dict[str, Any]:
    """A layer's JSON entry; ``b`` only when measured (None means I + W)."""
    d = asdict(lc)
    if d["b"] is None:
        del d["b"]
    return d


_UNITS = {"f": "seconds", "i": "seconds", "w": "seconds", "b": "seconds", "a2a_f": "seconds", "a2a_b": "seconds",
          "flops": "flops", "imbalance": "factor"}


def _check_units(raw: dict[str, Any], where: str) -> None:
    """Each time, byte count and FLOP count within ``planner.core.limits``'s range."""
    for key, value in raw.items():
        unit = "bytes" if key.endswith("_bytes") else _UNITS.get(key)
        if unit is not None:
            check_cost_value(f"{where}.{key}", value, unit)


_ROLE_ORDER = {"embedding": 0, "decoder": 1, "mtp": 2, "head": 3}


def _check_roles(roles: list[str], what: str) -> None:
    """At most one embedding, first; at most one head, last; MTP modules after the decoder layers."""
    for k, role in enumerate(roles):
        if role in ("embedding", "head") and roles.count(role) > 1:
            raise InputError(f"{what}.layers[{k}].role", f"a second {role}", f"a model has one {role}")
        if k and _ROLE_ORDER[role] < _ROLE_ORDER[roles[k - 1]]:
            raise InputError(f"{what}.layers[{k}].role", f"{role} after {roles[k - 1]}",
                             "list the layers in model order: embedding, decoder layers, MTP modules, head")


def costs_from_dict(data: Any, *, what: str = "costs") -> CostTable:
    """Validate and build a ``CostTable``; errors name the JSON path."""
    if isinstance(data, dict) and isinstance(data.get("layers"), list) and len(data["layers"]) > MAX_TABLE_LAYERS:
        raise InputError(f"{what}.layers", f"has {len(data['layers'])} entries, above the planner's limit of "
                         f"{MAX_TABLE_LAYERS}", "the limits are in planner/core/limits.py")
    check_schema(data, "costs", what=what)
    _check_roles([raw.get("role", "decoder") for raw in data["layers"]], what)
    for key in ("microbatch_size", "seq_len"):
        if data.get(key):
            check_batch_value(f"{what}.{key}", key, data[key])
    known = {f.name for f in fields(LayerCost)}
    layers = []
    for k, raw in enumerate(data["layers"]):
        _check_units(raw, f"{what}.layers[{k}]")
        kw = {key: (int(v) if key in _INT_FIELDS else v) for key, v in raw.items() if key in known}
        lc = LayerCost(**kw)
        if lc.act_w_bytes > lc.act_bytes:
            raise InputError(f"{what}.layers[{k}].act_w_bytes",
                             f"{lc.act_w_bytes} exceeds act_bytes {lc.act_bytes}",
                             "act_w_bytes is the part of act_bytes kept for the weight-gradient")
        layers.append(lc)
    decoder = [lc for lc in layers if lc.role == "decoder"] or layers
    if not any(lc.f for lc in decoder) or not any(lc.i + lc.w for lc in decoder):
        raise InputError(f"{what}.layers", "every decoder layer's forward (f) or backward (i, w) time is 0",
                         "give the measured times, as ppplan profile writes them")
    types = {lc.type for lc in layers}
    pairs: dict[tuple[str, str], float] = {}
    for k, p in enumerate(data.get("pairs", [])):
        for side in ("f_type", "b_type"):
            if p[side] not in types:
                raise InputError(f"{what}.pairs[{k}].{side}", f"unknown layer type {p[side]!r}",
                                 f"use one of {', '.join(sorted(types))}")
        check_cost_value(f"{what}.pairs[{k}].ov", p["ov"], "seconds")
        pairs[(p["f_type"], p["b_type"])] = float(p["ov"])
    curve = tuple(sorted((int(s), float(v)) for s, v in data.get("size_curve", [[1, 1.0]])))
    return CostTable(
        model=data.get("model", ""),
        source=data.get("source", "user"),
        layers=tuple(layers),
        pairs=pairs,
        p2p=P2PCost(**data.get("p2p", {})),
        microbatch_size=data.get("microbatch_size", 1),
        seq_len=data.get("seq_len", 0),
        size_curve=curve,
        device=data.get("device", ""),
        scale=float(data.get("scale", 1.0)),
        meta=data.get("meta", {}),
    )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a profile file's text, as ``load_costs`` records it (``CostFile``)."""
    return _sha256(read_input_text(path, what="profile"))


def load_costs(path: str | os.PathLike[str]) -> CostTable:
    """Load a cost table (profile) file; the table remembers the file (``CostTable.file``)."""
    text = read_input_text(path, what="profile")
    table = costs_from_dict(parse_json(text, what="profile", source=str(Path(path))), what="profile")
    return replace(table, file=CostFile(path=str(path), sha256=_sha256(text)))


def load_costs_for(path: str | os.PathLike[str], model: ModelSpec, *, fix: str) -> CostTable:
    """``load_costs(path)`` refused in one line (``--profile``, then ``fix``) unless it has a row per
    layer of ``model``: what ``ppplan plan --profile`` and ``ppplan replan --profile`` both check."""
    table = load_costs(path)
    if table.num_layers != model.num_layers:
        raise InputError("--profile", f"has {table.num_layers} layers, model {model.name} has "
                         f"{model.num_layers}", fix)
    return table


def save_costs(table: CostTable, path: str | os.PathLike[str]) -> None:
    """Write a cost table atomically."""
    write_json_atomic(path, costs_to_dict(table))
