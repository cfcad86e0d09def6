"""Cost tables written by tests: one one-layer stage per pipeline stage, as users hand-write them
(``examples/costs/four_stages.json``, ``planner/data/schemas/costs.schema.json``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

__all__ = ["write_stage_table", "spread", "GIB"]

GIB = 2**30


def spread(stages: int, share: float) -> list[float]:
    """Per-stage time factors spread evenly over ``1 +- share / 2`` (first stage lightest)."""
    return [1 - share / 2 + share * s / (stages - 1) for s in range(stages)]


def write_stage_table(path: Path, *, f: float, i: float, w: float, factors: Sequence[float],
                      act_bytes: int = GIB, act_w_share: float = 0.4, latency_s: float = 1e-4,
                      bandwidth: float = 1e30, work_bytes: Sequence[int] = ()) -> Path:
    """A table of ``len(factors)`` one-layer stages, stage s taking ``factors[s]`` x (F, I, W);
    the embedding role on the first layer, the head on the last."""
    layers = []
    for s, k in enumerate(factors):
        layer = {"type": f"stage{s}", "f": f * k, "i": i * k, "w": w * k, "act_bytes": act_bytes,
                 "act_w_bytes": int(act_bytes * act_w_share), "out_bytes": 2**20}
        if work_bytes:
            layer["work_bytes"] = work_bytes[s]
        if s == 0:
            layer["role"] = "embedding"
        elif s == len(factors) - 1:
            layer["role"] = "head"
        layers.append(layer)
    path.write_text(json.dumps({"schema_version": 1, "kind": "ppplan.costs", "model": path.stem, "source": "user",
                                "microbatch_size": 1, "p2p": {"latency_s": latency_s, "bandwidth": bandwidth},
                                "layers": layers}))
    return path
