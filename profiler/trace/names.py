"""The range naming convention: one owner for the names a traced run gives its
``record_function`` ranges and the parser the importer reads them back with.

A layer's work is ``ppplan/<kind>/<index>/<type>``: kind F (forward), I (input-gradient),
W (weight-gradient) or B (full backward), index the layer's position in the model
(``planner.core.model.LayerSpec.index``), type its cost-table type key
(``LayerSpec.type_key``, e.g. ``gqa+moe``). An MoE layer's all-to-all (dispatch,
combine, their gradients, the token counts) is ``ppplan/a2a/<name>``, attributed to the work
range around it (forward or backward).
``ppplan/L/<index>/<type>`` is the loss computed on layer ``index``'s output (torch's schedule
calls it after the last stage's forward, outside the layer's F range); the importer adds it to
that layer's F, as the profiler's head forward and the planner's last-stage F include the loss.
A fused pair (F of one layer beside the backward of another, torch's ``OVERLAP_F_B``)
is ``ppplan/pair/<f type>/<b type>``. The trace's metadata key ``ppplan`` (JSON) says
which model, width scale and microbatch shape the run had (``RUN_METADATA``).

``ppplan/calibrate`` is the recorder's measurement of the profiler's own cost
(``profiler.trace.overhead``): a fixed block of work run once unprofiled, its best time
stored as ``RUN_METADATA``'s ``calibration.unprofiled_s``, and run again under the profiler
inside such ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PREFIX", "RUN_METADATA", "CALIBRATION_RANGE", "WORK_KINDS", "LOSS_KIND", "TraceRange", "layer_range", "a2a_range", "pair_range",
           "parse_range"]

PREFIX = "ppplan"
"""First component of every range name the importer reads."""
RUN_METADATA = "ppplan"
"""Trace metadata key (``torch.profiler.profile.add_metadata_json``) holding the run's shape."""
CALIBRATION_RANGE = f"{PREFIX}/calibrate"
"""One profiled run of the recorder's calibration block (``profiler.trace.overhead``); not a layer range."""
WORK_KINDS = ("F", "I", "W", "B")
"""Layer work kinds a range may carry (the schedule's action letters)."""
LOSS_KIND = "L"
"""The loss on a layer's output: counted in that layer's F."""


@dataclass(frozen=True, kw_only=True)
class TraceRange:
    """One parsed range name."""

    what: str
    """``work`` (a layer's F, I, W or B), ``a2a`` (its all-to-all) or ``pair`` (a fused pair)."""
    kind: str
    """F, I, W, B or L (the loss on the layer's output) for work; empty otherwise."""
    index: int = -1
    """Layer index (-1 for a pair)."""
    type: str = ""
    """Layer type key (the forward layer's for a pair; the exchange's name for a2a)."""
    b_type: str = ""
    """The backward layer's type key of a pair; empty otherwise."""


def layer_range(kind: str, index: int, type_key: str) -> str:
    """Name of layer ``index``'s ``kind`` work (F, I, W, B, or L: the loss on its output)."""
    return f"{PREFIX}/{kind}/{index}/{type_key}"


def a2a_range(name: str) -> str:
    """Name of one all-to-all (``name``: which exchange, e.g. ``dispatch``)."""
    return f"{PREFIX}/a2a/{name}"


def pair_range(f_type: str, b_type: str) -> str:
    """Name of a fused pair: F of an ``f_type`` layer beside the backward of a ``b_type`` layer."""
    return f"{PREFIX}/pair/{f_type}/{b_type}"


def parse_range(name: str) -> TraceRange | None:
    """The range ``name`` stands for; None when it is not one of ppplan's."""
    parts = name.split("/")
    if len(parts) < 3 or parts[0] != PREFIX:
        return None
    if parts[1] == "a2a":
        return TraceRange(what="a2a", kind="", type="/".join(parts[2:]))
    if parts[1] == "pair" and len(parts) == 4:
        return TraceRange(what="pair", kind="", type=parts[2], b_type=parts[3])
    if parts[1] in (*WORK_KINDS, LOSS_KIND) and len(parts) == 4 and parts[2].isdigit():
        return TraceRange(what="work", kind=parts[1], index=int(parts[2]), type=parts[3])
    return None
