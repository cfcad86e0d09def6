"""``ppplan profile --from-trace``: the cost table of the user's own traced run, its times from
the traces (``profiler.trace``) and every other field from the analytical model of the same
model on its cluster (the fill); docs/trace-import.md."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from planner.core.costs import CostTable
from planner.core.errors import InputError
from planner.core.hf_config import load_model

__all__ = ["profile_from_trace"]


def profile_from_trace(folder: str, *, model: str | None = None, cluster: str | Path | None = None) -> CostTable:
    """Read every rank's trace in ``folder`` and build the cost table; ``model`` defaults to
    the one the run recorded (``profiler.trace.names.RUN_METADATA``)."""
    from planner.core.cluster_resolve import resolve_cluster
    from profiler.analytical import analytical_costs
    from profiler.layers import scaled_model
    from profiler.trace.table import costs_from_trace, read_run, trace_facts

    traces, run = read_run(folder)
    name = model or run.get("model")
    if not name:
        raise InputError("--model", "the traces do not name their model", "pass --model MODEL (a shipped id or a config.json)")
    spec = load_model(str(name))
    facts = trace_facts(traces, folder)
    scale = float(run.get("scale", 1.0))
    cl = resolve_cluster(spec, cluster, pp=run.get("pp"), ep=run.get("ep"), seq_len=run.get("seq_len"),
                         micro_batch_size=run.get("micro_batch"))
    fill = analytical_costs(scaled_model(spec, scale) if scale != 1.0 else spec, cl)
    table = costs_from_trace(facts, fill, folder=str(folder), run=run)
    return replace(table, model=spec.name, scale=scale)
