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

from planner.core.hf_config import load_model
from planner.core.plan import load_plan_file
from planner.replanning.megatron_layout import megatron_layout
from profiler.megatron_tpe import TpeLayout

SHIPPED_PLAN = Path(__file__).resolve().parents[2] / "plans" / "examples" / "qwen3-next-80b-a3b.default.plan.json"

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


def draws(kind: str, *, seed: int, iterations: int) -> dict[tuple[int, int], list[int]]:
    """(iteration, ModelSpec layer index) -> tokens per expert of one record, in trace order."""
    rng = np.random.default_rng([seed, _KIND_SEED[kind]])
    out = {}
    for step in range(iterations):
        for _, _, index in _layers():
            out[((step + 1) * ITER_STEP, index)] = _counts(rng, *_sigmas(kind, index, step, iterations))
    return out


def jsonl_trace(kind: str, *, seed: int, iterations: int) -> str:
    """ppplan JSON lines (global 1-based numbering): ``ep`` rows of local-expert counts per record."""
    counts = draws(kind, seed=seed, iterations=iterations)
    number = {index: (block, k) for block, k, index in _layers()}
    lines = []
    for (it, index), row in counts.items():
        per = NUM_EXPERTS // EP
        rows = [row[r * per:(r + 1) * per] for r in range(EP)]
        block, k = number[index]
        rec = {"iter": it, "block": block, "layer": k, "tpe": rows}
        lines.append(json.dumps(rec, separators=(",", ":")))
    return "\n".join(lines) + "\n"


def plain_trace(kind: str, *, seed: int) -> str:
    """Plain ``{"layers": {...}}`` snapshot, keyed by ModelSpec layer index."""
    layers = {str(index): row for (_, index), row in draws(kind, seed=seed, iterations=1).items()}
    body = ",\n".join(f' "{k}": {json.dumps(v, separators=(",", ":"))}' for k, v in layers.items())
    return '{"iter": %d, "layers": {\n%s\n}}\n' % (ITER_STEP, body)


_KIND_SEED = {"balanced": 1, "hot_early": 2, "hot_late": 3, "drift": 4, "start": 5}


def write_megatron_logs(out_dir: Path, layout: TpeLayout, counts: dict[tuple[int, int], list[int]], *,
                        seed: int, recompute: bool = False) -> None:
    """Write ``counts`` (iteration, layer -> tokens per expert of the iteration) as the logs of a run.

    One ``rank<R>.jsonl`` per global rank holding MoE layers, in Megatron's ``save_tpe``
    form: rank-local layer indices, one row per forward call of local-expert counts. Each
    count is split at random over the microbatches and expert-data-parallel replicas (a
    multinomial, seeded), ETP peers get identical rows, ``recompute`` re-runs every forward
    before its backward (Megatron's full recomputation: each row twice, in the order the
    interleaved schedule runs them).
    """
    rng = np.random.default_rng([seed, 6])
    edp = 1 + max(c.edp for c in layout.ranks)
    m, n = layout.microbatches, layout.local_experts
    cells = {key: rng.multinomial(np.asarray(row), [1.0 / (m * edp)] * (m * edp)) for key, row in counts.items()}
    iters = sorted({it for it, _ in counts})
    out_dir.mkdir(parents=True, exist_ok=True)
    for rank, c in enumerate(layout.ranks):
        keys = sorted(layout.moe_layers[c.pp])
        lines = []
        for it in iters:
            for key in keys:
                chunks = dict(layout.moe_layers[c.pp][key])
                calls = layout.recompute_calls[c.pp] if recompute else layout.forward_calls
                rows = [cells[(it, chunks[ch])][c.ep * n:(c.ep + 1) * n, mb * edp + c.edp].tolist()
                        for mb, ch in calls if ch in chunks]
                block, mtp_idx, layer = key
                rec = {"iter": it, "block": block, **({"mtp_idx": mtp_idx} if block == "mtp" else {}),
                       "layer": layer, "tpe": rows}
                lines.append(json.dumps(rec) + "\n")
        if lines:
            (out_dir / f"rank{rank}.jsonl").write_text("".join(lines))


TRACES = {"start": ("start", 1), "balanced": ("balanced", 1), "hot_early": ("hot_early", 2),
          "hot_late": ("hot_late", 2), "drift": ("drift", 4)}
"""Megatron log folder name -> (kind, iterations) of the single-file trace it equals."""


def megatron_folders(out_dir: Path, plan_path: Path, *, seed: int, names: list[str] | None = None) -> list[Path]:
    """Per shipped trace, ``out_dir/<name>/`` with the logs a run of the plan writes."""
    plan = load_plan_file(plan_path)
    model = load_model(plan.model.name)
    layout = megatron_layout(plan, model)
    written = []
    for name in names or list(TRACES):
        kind, iterations = TRACES[name]
        write_megatron_logs(out_dir / name, layout, draws(kind, seed=seed, iterations=iterations), seed=seed)
        written.append(out_dir / name)
    return written


def main(argv: list[str] | None = None) -> None:
    """Write the five traces (and, with --megatron-dir, their Megatron log folders)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--megatron-dir", type=Path, help="also write Megatron's per-rank logs here, one "
                        "folder per trace (about 6 MB each for the shipped plan)")
    parser.add_argument("--plan", type=Path, default=SHIPPED_PLAN, help="plan of the run the logs are for")
    parser.add_argument("--megatron-trace", action="append", choices=list(TRACES),
                        help="only this trace's log folder (repeatable; default: all five)")
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
    print(f"wrote {len(files)} traces to {args.out_dir}: {', '.join(files)}")
    if args.megatron_dir is not None:
        folders = megatron_folders(args.megatron_dir, args.plan, seed=args.seed, names=args.megatron_trace)
        print(f"wrote Megatron per-rank logs: {', '.join(str(f) for f in folders)}")


if __name__ == "__main__":
    main()
