"""Two sites joined by a slow link: which dimension crosses it, per model, latency and bandwidth.

For each model and each (latency, bandwidth) cell, ``planner.api.plan`` (what ``ppplan plan
MODEL --sites 2 --inter-site-gbps G --inter-site-latency-ms L`` calls) plans the pp-crossing
and the dp-crossing layouts and keeps the faster; the row gives both optimizer steps
(schedule + exposed DP traffic + Adam), the winner and the crossover bandwidth the plan
records. Cases: Llama-3-8B on its shipped cluster (16 H100, pp 4 x dp 4, global batch 128), the
same with global batch 1024 (8x the microbatches over the pipeline boundary, the same gradient),
and Qwen3-30B-A3B on its shipped cluster (32 H100, pp 4 x dp 8) with ep 4 instead of 8: with
ep 8, the dp-crossing layout would put each expert-parallel group across both sites, which is
refused, and only pp could cross. Analytical costs (no GPU measured); deterministic under ``--work``.
docs/sites.md gives the figures.

    python benchmarks/sites.py [--json] [--work 0.2] [--only CASE,...]
"""

from __future__ import annotations

import argparse
import json
import time

from planner.api import plan as make_plan

CASES = {"llama3-8b": ("llama3-8b", {}), "llama3-8b-gb1024": ("llama3-8b", {"global_batch": 1024}),
         "qwen3-30b-a3b-ep4": ("qwen3-30b-a3b", {"ep": 4})}
"""Case -> (model, overrides of its shipped cluster)."""
LATENCIES_MS = (1, 10, 100)
BANDWIDTHS_GBPS = (1, 10, 100, 400)


def _cell(case: str, latency_ms: float, gbps: float, work: float) -> dict:
    t0 = time.perf_counter()
    model, overrides = CASES[case]
    p = make_plan(model, sites=2, inter_site_gbps=gbps, inter_site_latency_ms=latency_ms, work=work, **overrides)
    sites = p.extra["sites"]
    steps = sites["steps_s"]
    return {"case": case, "latency_ms": latency_ms, "gbps": gbps, "pp_step_s": steps.get("pp"),
            "dp_step_s": steps.get("dp"), "crossing": sites["crossing"], "crossover_gbps": sites["crossover_gbps"],
            "degrees": {k: p.parallel[k] for k in ("pp", "dp", "tp", "ep")}, "wall_s": round(time.perf_counter() - t0, 2)}


def run(cases: list[str], work: float) -> list[dict]:
    """Every cell of every case, in table order."""
    return [_cell(c, lat, g, work) for c in cases for lat in LATENCIES_MS for g in BANDWIDTHS_GBPS]


def _text(rows: list[dict]) -> str:
    head = f"{'case':18} {'lat ms':>6} {'Gb/s':>5} {'pp step s':>10} {'dp step s':>10} {'wins':>4} {'crossover Gb/s':>14}"
    lines = [head] + [f"{r['case']:18} {r['latency_ms']:>6} {r['gbps']:>5} {r['pp_step_s']:>10.3f} "
                      f"{r['dp_step_s']:>10.3f} {r['crossing']:>4} {str(r['crossover_gbps']):>14}" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--work", type=float, default=0.2, help="search effort per plan (reference seconds)")
    ap.add_argument("--only", help=f"comma-separated cases (default: all of {', '.join(CASES)})")
    args = ap.parse_args()
    cases = args.only.split(",") if args.only else list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case {unknown[0]!r}; use one of {', '.join(CASES)}")
    rows = run(cases, args.work)
    if args.json:
        print(json.dumps({"work": args.work, "rows": rows}, indent=1))
    else:
        print(_text(rows))


if __name__ == "__main__":
    main()
