"""``ppplan replay --torch-profile DIR``: the replay's layers named for the trace importer
(``profiler.trace.names``, through ``profiler.trace.record``) and its timed steps recorded,
one PyTorch profiler trace per rank."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

from planner.core.model import ModelSpec

__all__ = ["label_stage", "torch_profile"]


def label_stage(mod: Any, spec: ModelSpec) -> None:
    """Label each layer of a stage module (``layers.<global index>``) with its index and type
    key, and time its forwards as F ranges (its I, W and B ranges come from
    ``planner.replay.timing.LayerCuts``)."""
    from profiler.trace.record import annotate_forward, label

    for key, layer in mod.layers.items():
        label(layer, int(key), spec.layers[int(key)].type_key)
        annotate_forward(layer)


def torch_profile(folder: str | None, rank: int, run: dict[str, Any]) -> ContextManager[Callable[[], None]]:
    """``profiler.trace.record.recording`` into ``folder`` (yields its ``step``), or a no-op
    with a no-op ``step`` when ``folder`` is None."""
    if not folder:
        return contextlib.nullcontext(lambda: None)
    from profiler.trace.record import recording

    return recording(folder, rank, run)
