"""Small random cost tables for the partition tests (shared by tests/test_partition*.py)."""

from __future__ import annotations

import itertools
import random

from planner.core.costs import CostTable, LayerCost, P2PCost

__all__ = ["random_table", "uniform_table", "all_partitions"]


def random_table(seed: int, num_layers: int, *, types: int = 3, overlap: bool = True) -> CostTable:
    """Random heterogeneous layers with random pair costs between serial/2 and serial."""
    rng = random.Random(seed)
    kinds = [f"t{k}" for k in range(types)]
    layers = []
    for k in range(num_layers):
        ty = rng.choice(kinds)
        layers.append(LayerCost(type=ty, f=rng.uniform(1, 3) * 1e-3, i=rng.uniform(1, 4) * 1e-3,
                                w=rng.uniform(0.5, 2) * 1e-3, a2a_f=rng.uniform(0, 2) * 1e-3,
                                a2a_b=rng.uniform(0, 2) * 1e-3, act_bytes=rng.randint(50, 200) << 20,
                                act_w_bytes=rng.randint(10, 50) << 20, param_bytes=rng.randint(1, 4) << 30,
                                out_bytes=1 << 20))
    first = {lc.type: lc for lc in reversed(layers)}
    pairs = {}
    if overlap:
        for ta, tb in itertools.product(first, first):
            serial = first[ta].serial_f + first[tb].serial_i
            pairs[(ta, tb)] = serial * rng.uniform(0.5, 1.0)
    layers = [LayerCost(**{**lc.__dict__, **_same_type(first[lc.type])}) for lc in layers]
    return CostTable(model="random", source="user", layers=tuple(layers), pairs=pairs,
                     p2p=P2PCost(latency_s=5e-6, bandwidth=100e9))


def _same_type(ref: LayerCost) -> dict:
    """Pair costs are per type, so layers of one type share their times."""
    return {k: getattr(ref, k) for k in ("f", "i", "w", "a2a_f", "a2a_b")}


def uniform_table(num_layers: int, *, f: float = 1e-3, i: float = 2e-3, w: float = 1e-3) -> CostTable:
    """Identical layers, free point-to-point links: the textbook pipeline."""
    layers = tuple(LayerCost(type="x", f=f, i=i, w=w, act_bytes=1 << 20, act_w_bytes=1 << 18)
                   for _ in range(num_layers))
    return CostTable(model="uniform", source="user", layers=layers,
                     p2p=P2PCost(latency_s=0.0, bandwidth=float("inf")))


def all_partitions(num_layers: int, num_stages: int):
    """Every split of range(num_layers) into num_stages non-empty contiguous ranges."""
    for cuts in itertools.combinations(range(1, num_layers), num_stages - 1):
        edges = (0, *cuts, num_layers)
        yield [(edges[s], edges[s + 1]) for s in range(num_stages)]
