"""Cost tables under a given routing: analytical, or a measured profile rescaled.

Analytical plans are re-derived with ``profiler.analytical.analytical_costs(model,
cluster, imbalance=...)``, which scales each MoE layer's expert compute and all-to-all
volume by its busiest-EP-rank factor, so the overlap pairs (and the hidden share)
change with it.

A measured profile cannot be re-measured offline. Its MoE layers are rescaled by
the ratio the analytical model predicts between the new routing and the routing
the profile was measured under (``LayerCost.imbalance``, 1 when not recorded):
``x_new = x_measured * x_analytical(new) / x_analytical(measured)`` for F, I, W,
the exposed all-to-all, activation bytes, and each overlap pair ``OV[a, b]``. The
measured level stays; only the change comes from the model.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from planner.core.cluster import ClusterSpec
from planner.core.costs import CostTable, LayerCost
from planner.core.costs_io import load_costs_for
from planner.core.model import ModelSpec
from profiler.analytical import analytical_costs

__all__ = ["routed_costs", "rescale_profile"]

_TIMES = ("f", "i", "w", "a2a_f", "a2a_b")
_BYTES = ("act_bytes", "act_w_bytes")


def routed_costs(model: ModelSpec, cluster: ClusterSpec, factors: list[float], *,
                 profile: str | Path | None = None) -> CostTable:
    """Cost table of ``model`` on ``cluster`` with ``factors[l]`` imbalance per layer."""
    if profile is None:
        return analytical_costs(model, cluster, imbalance=factors)
    table = load_costs_for(profile, model, fix="pass the profile the plan was made from")
    table = table.at_microbatch_size(cluster.training.micro_batch_size)
    return rescale_profile(table, model, cluster, factors)


def rescale_profile(table: CostTable, model: ModelSpec, cluster: ClusterSpec,
                    factors: list[float]) -> CostTable:
    """``table`` (measured) moved to routing ``factors`` by analytical ratios (module doc)."""
    measured_at = [lc.imbalance for lc in table.layers]
    changed = [k for k, layer in enumerate(model.layers)
               if layer.is_moe and abs(factors[k] - measured_at[k]) > 1e-12]
    if not changed:
        return table
    ref = analytical_costs(model, cluster, imbalance=measured_at)
    new = analytical_costs(model, cluster, imbalance=factors)
    layers = list(table.layers)
    for k in changed:
        layers[k] = _scaled_layer(table.layers[k], ref.layers[k], new.layers[k], k, factors[k])
    stale = {layers[k].type for k in changed}
    pairs = {key: v for key, v in table.pairs.items() if stale.isdisjoint(key)}
    for a in range(table.num_layers):
        for b in range(table.num_layers):
            key = (layers[a].type, layers[b].type)
            if key in pairs or (a not in changed and b not in changed):
                continue
            pairs[key] = table.ov(a, b) * _ratio(new.ov(a, b), ref.ov(a, b))
    meta = {**table.meta, "rescaled_for_routing": {str(k): factors[k] for k in changed}}
    return replace(table, layers=tuple(layers), pairs=pairs, meta=meta)


def _scaled_layer(lc: LayerCost, ref: LayerCost, new: LayerCost, index: int, factor: float) -> LayerCost:
    kw = {name: getattr(lc, name) * _ratio(getattr(new, name), getattr(ref, name)) for name in _TIMES}
    kw.update({name: int(getattr(lc, name) * _ratio(getattr(new, name), getattr(ref, name)))
               for name in _BYTES})
    kw["act_w_bytes"] = min(kw["act_w_bytes"], kw["act_bytes"])
    if lc.b is not None:  # a measured full backward moves with I + W (the analytical B)
        kw["b"] = lc.b * _ratio(new.i + new.w, ref.i + ref.w)
    base = lc.type.split("@")[0]
    return replace(lc, type=f"{base}@{index}", imbalance=factor, **kw)


def _ratio(new: float, ref: float) -> float:
    return new / ref if ref > 0 else 1.0
