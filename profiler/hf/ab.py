"""Native and transformers modules of one model timed side by side, in one process.

Two profiles taken minutes apart on a shared machine differ by the machine's drift, so
``compare_sources`` alternates the two sources' measurements round by round: both see
the same machine state. Usage:
``python -m profiler.hf.ab qwen3-30b-a3b --scale 0.0625 --seq-len 256 --out ab.json``.

[Note: thread CPU time] The comparison reads the measuring thread's CPU time
(``time.thread_time``), not the wall clock: with one torch thread every forward and
(on the CPU) every backward op runs on the calling thread, so its CPU time is the
layer's compute whatever else the machine runs, while the wall clock also counts the
slices the scheduler gave other jobs. It is the comparison's unit, not the profiler's:
``ppplan profile`` keeps the wall clock a training step sees.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch

from planner.core.model import ModelSpec
from profiler.measure import measure_layer
from profiler.measure_worker import BuiltTypes, WorkerConfig, measure_types
from profiler.timing import Clock

__all__ = ["compare_sources", "ThreadClock", "main"]

_KINDS = ("f", "i", "w", "b")


class ThreadClock(Clock):
    """A CPU ``Clock`` whose marks are this thread's CPU time ([Note: thread CPU time])."""

    def __init__(self) -> None:
        super().__init__(torch.device("cpu"))

    def mark(self) -> float:
        return time.thread_time()


def _built(model: ModelSpec, raw: dict[str, Any], modules: str, *, scale: float, seq_len: int,
           seed: int) -> BuiltTypes:
    cfg = WorkerConfig(model=model, scale=scale, ep=1, device="cpu", seq_len=seq_len, micro_batch=1, warmup=1,
                       repeats=1, seed=seed, threads=torch.get_num_threads(), pairs=False, modules=modules,
                       raw_config=raw)
    return measure_types(cfg, torch.device("cpu"), None, lambda label: None)[2]


def compare_sources(model: ModelSpec, *, raw: dict[str, Any], scale: float, seq_len: int, rounds: int = 5,
                    repeats: int = 3, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per layer type: ``{"transformers": {f, i, w, b, experts_f, ...}, "native": {...},
    "ratio": {f, i, w, b}}`` in seconds (``experts_*``: the routed-expert segment's part;
    ratio: transformers / native), medians over ``rounds`` alternated rounds.

    The modules of every layer type are built from both sources
    (``profiler.measure_worker.measure_types``, which also warms them up), then measured
    round by round (``profiler.measure.measure_layer``), the first source swapped each
    round."""
    built = {s: _built(model, raw, s, scale=scale, seq_len=seq_len, seed=seed) for s in ("transformers", "native")}
    clock = ThreadClock()
    samples: dict[tuple[str, str], list[dict[str, float]]] = {}
    for r in range(rounds):
        for source in (("transformers", "native") if r % 2 == 0 else ("native", "transformers")):
            b = built[source]
            for t, module in b.modules.items():
                lt = measure_layer(module, b.inputs[t], clock=clock, warmup=0, repeats=repeats,
                                   loss=b.losses[t], seed=seed)
                row = {k: getattr(lt, k).median for k in _KINDS}
                row |= {f"experts_{k}": v for k, v in zip(_KINDS, lt.expert)}
                samples.setdefault((t, source), []).append(row)
    out = {}
    for t in built["native"].modules:
        hf, nat = samples[(t, "transformers")], samples[(t, "native")]
        keys = list(hf[0])
        out[t] = {"transformers": {k: statistics.median(s[k] for s in hf) for k in keys},
                  "native": {k: statistics.median(s[k] for s in nat) for k in keys},
                  "ratio": {k: _ratio(hf, nat, k) for k in _KINDS}}
    return out


def _ratio(hf: list[dict[str, float]], nat: list[dict[str, float]], k: str) -> float | None:
    """Median per-round transformers / native of ``k``; None where native measured none
    (the embedding's I: token ids take no gradient)."""
    ratios = [a[k] / n[k] for a, n in zip(hf, nat) if n[k] > 0]
    return statistics.median(ratios) if ratios else None


def _markdown(model: str, rows: dict[str, dict[str, Any]]) -> str:
    lines = [f"| {model} layer type | F tf / native (ms) | I tf / native | W tf / native | B tf / native "
             "| experts F+I+W tf / native | ratio F, I, W, B |", "|---|---|---|---|---|---|---|"]
    for t, row in rows.items():
        cells = [f"{1e3 * row['transformers'][k]:.2f} / {1e3 * row['native'][k]:.2f}" for k in _KINDS]
        cells.append(" / ".join(f"{1e3 * sum(row[s][f'experts_{k}'] for k in 'fiw'):.2f}"
                                for s in ("transformers", "native")))
        ratio = ", ".join("-" if row["ratio"][k] is None else f"{row['ratio'][k]:.2f}" for k in _KINDS)
        lines.append(f"| {t} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: compare one model's module sources, write JSON, print a markdown table."""
    from planner.core.hf_config import load_model, resolve_model_path
    from planner.core.jsonio import read_json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--scale", type=float, default=1 / 16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_model(args.model)
    raw = read_json(resolve_model_path(args.model), what="model config")
    rows = compare_sources(model, raw=raw, scale=args.scale, seq_len=args.seq_len, rounds=args.rounds,
                           repeats=args.repeats)
    with open(args.out, "w") as fh:
        json.dump({"model": args.model, "scale": args.scale, "seq_len": args.seq_len, "rounds": args.rounds,
                   "repeats": args.repeats, "threads": args.threads, "types": rows}, fh, indent=1)
    sys.stdout.write(_markdown(args.model, rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
