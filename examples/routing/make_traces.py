"""Write the shipped synthetic routing traces for qwen3-next-80b-a3b at EP 8.

    python examples/routing/make_traces.py [--out-dir examples/routing] [--seed 0]

Each record counts the routed token copies of one iteration on one data-parallel
replica: 32 sequences x 4096 tokens x top-10 = 1,310,720 copies over 512 experts
(the shipped cluster: global batch 256, dp 8). Counts are drawn per record as a
multinomial over expert weights ``w_e = rank_load[r(e)] x expert_load[e]`` where
both factors are log-normal (reference.md, "Routing imbalance": per-rank token
counts fit a log-normal), experts are on EP ranks contiguously (64 each):

- balanced: rank sigma 0.02, expert sigma 0.02 (near loss-free balancing: busiest rank
  about 1.03x the mean, MaxVio about 0.1, mostly sampling noise).
- hot: rank sigma 0.35, expert sigma 0.2 (hot experts crowding onto some EP ranks:
  busiest rank 1.3-2.0x the mean, MaxVio 1-2; a stress case, harsher than the
  0.5-0.7 MaxVio reported with an auxiliary loss).

Files (all seeded, regenerating gives identical bytes):

- ``start.json`` (plain format, one snapshot): every layer balanced; the routing at the
  start of a run, which the benchmark's starting plan is made for.
- ``balanced.json`` (plain format): every layer balanced, another draw (noise only).
- ``hot_early.jsonl`` / ``hot_late.jsonl`` (Megatron JSON lines, 2 iterations):
  decoder layers 1-12 / 37-48 and the MTP layer hot, the rest balanced.
- ``drift.jsonl`` (4 iterations): decoder layers 13-30 go from balanced to hot,
  rank sigma 0.02 -> 0.35 linearly over the iterations; pass ``--window 1`` to see
  the last iteration alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

NUM_EXPERTS = 512
EP = 8
TOP_K = 10
DECODER_LAYERS = 48
MTP_LAYERS = 1
COPIES = 32 * 4096 * TOP_K
BALANCED = (0.02, 0.02)
HOT = (0.35, 0.2)
ITER_STEP = 1000


def _counts(rng: np.random.Generator, rank_sigma: float, expert_sigma: float) -> list[int]:
    rank = rng.lognormal(0.0, rank_sigma, EP).repeat(NUM_EXPERTS // EP)
    expert = rng.lognormal(0.0, expert_sigma, NUM_EXPERTS)
    weights = rank * expert
    return rng.multinomial(COPIES, weights / weights.sum()).tolist()


def _layers() -> list[tuple[str, int, int]]:
    """(block, Megatron 1-based number within the block, ModelSpec index)."""
    dec = [("decoder", k, k) for k in range(1, DECODER_LAYERS + 1)]
    return dec + [("mtp", k, DECODER_LAYERS + k) for k in range(1, MTP_LAYERS + 1)]


def _sigmas(kind: str, index: int, step: int, steps: int) -> tuple[float, float]:
    if kind == "hot_early" and (index <= 12 or index > DECODER_LAYERS):
        return HOT
    if kind == "hot_late" and index >= 37:
        return HOT
    if kind == "drift" and 13 <= index <= 30:
        t = step / max(steps - 1, 1)
        return (BALANCED[0] + t * (HOT[0] - BALANCED[0]), BALANCED[1] + t * (HOT[1] - BALANCED[1]))
    return BALANCED


def jsonl_trace(kind: str, *, seed: int, iterations: int) -> str:
    """Megatron tokens-per-expert JSON lines: ``ep`` rows of local-expert counts per record."""
    rng = np.random.default_rng([seed, _KIND_SEED[kind]])
    lines = []
    for step in range(iterations):
        for block, number, index in _layers():
            counts = _counts(rng, *_sigmas(kind, index, step, iterations))
            per = NUM_EXPERTS // EP
            rows = [counts[r * per:(r + 1) * per] for r in range(EP)]
            rec = {"iter": (step + 1) * ITER_STEP, "block": block, "layer": number, "tpe": rows}
            lines.append(json.dumps(rec, separators=(",", ":")))
    return "\n".join(lines) + "\n"


def plain_trace(kind: str, *, seed: int) -> str:
    """Plain ``{"layers": {...}}`` snapshot, keyed by ModelSpec layer index."""
    rng = np.random.default_rng([seed, _KIND_SEED[kind]])
    layers = {str(index): _counts(rng, *_sigmas(kind, index, 0, 1)) for _, _, index in _layers()}
    body = ",\n".join(f' "{k}": {json.dumps(v, separators=(",", ":"))}' for k, v in layers.items())
    return '{"iter": %d, "layers": {\n%s\n}}\n' % (ITER_STEP, body)


_KIND_SEED = {"balanced": 1, "hot_early": 2, "hot_late": 3, "drift": 4, "start": 5}


def main(argv: list[str] | None = None) -> None:
    """Write the five traces."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "start.json": plain_trace("start", seed=args.seed),
        "balanced.json": plain_trace("balanced", seed=args.seed),
        "hot_early.jsonl": jsonl_trace("hot_early", seed=args.seed, iterations=2),
        "hot_late.jsonl": jsonl_trace("hot_late", seed=args.seed, iterations=2),
        "drift.jsonl": jsonl_trace("drift", seed=args.seed, iterations=4),
    }
    for name, text in files.items():
        (args.out_dir / name).write_text(text)


if __name__ == "__main__":
    main()
