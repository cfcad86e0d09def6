"""Measured profiler on the CPU: wall time, repeatability and hidden share per pair type.

Per model (``MODELS``, at a reduced width), the whole measured profile
(``profiler.measured.measured_costs``: routing, links, one layer per type, every pair of
types overlapped and serial) on a 2-rank expert-parallel gloo group: its wall time (target
``TARGET_S``), per type the median F, I, W and all-to-all with their coefficients of
variation, per pair the hidden share ``1 - OV / serial``, and the pairs with an all-to-all
against those without (whose spread is the measurement's noise floor, ``_summary``).
docs/profiler.md gives the figures.

    python benchmarks/measured_profile.py [--json] [--only MODEL] [--scale F] [--ep N] [--seq-len T] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from planner.core.hf_config import load_model
from profiler.measured import ProfileRequest, measured_costs

MODELS = {"qwen3-next-80b-a3b": 1 / 16, "deepseek-v3": 1 / 32}
"""Model -> default width scale (hidden 128 and 224)."""
TARGET_S = 60.0


def _layers(table) -> dict:
    cv = table.meta["cv"]
    rows = {}
    for lc in table.layers:
        base = lc.type.split("@", 1)[0]
        if base in rows:
            continue
        rows[base] = {"f_ms": 1e3 * lc.f, "i_ms": 1e3 * lc.i, "w_ms": 1e3 * lc.w,
                      "b_ms": None if lc.b is None else 1e3 * lc.b,
                      "a2a_f_ms": 1e3 * lc.a2a_f, "a2a_b_ms": 1e3 * lc.a2a_b,
                      **{f"cv_{k}": v for k, v in cv[base].items()}}
    return rows


def _pairs(table) -> dict:
    return {k: {"hidden_share": v["hidden_share"], "ov_ms": 1e3 * v["ov"], "serial_ms": 1e3 * v["serial"],
                "cv": v["cv"]} for k, v in table.meta["pairs"].items()}


def _summary(layers: dict, pairs: dict) -> dict:
    """Hidden share of pairs with an all-to-all on either side vs pairs with none (whose
    hidden share should be 0: their spread is the measurement's noise floor)."""
    comm = {t for t, row in layers.items() if row["a2a_f_ms"] + row["a2a_b_ms"] > 0}
    groups: dict[str, list[float]] = {"with_a2a": [], "without_a2a": []}
    for k, row in pairs.items():
        fa, fb = k.split(" / ")
        groups["with_a2a" if fa in comm or fb in comm else "without_a2a"].append(row["hidden_share"])
    return {g: {"pairs": len(v), "mean": sum(v) / len(v) if v else None,
                "min": min(v, default=None), "max": max(v, default=None)} for g, v in groups.items()}


def run(name: str, req: ProfileRequest) -> dict:
    t0 = time.perf_counter()
    table = measured_costs(load_model(name), req)
    wall = time.perf_counter() - t0
    layers, pairs = _layers(table), _pairs(table)
    return {"wall_s": round(wall, 2), "within_target": wall < TARGET_S, "load_avg_after": os.getloadavg()[0],
            "scaled": table.meta["profiler"], "layers": layers, "pairs": pairs,
            "hidden_share_summary": _summary(layers, pairs)}


def _print(results: dict) -> None:
    for name, r in results["models"].items():
        print(f"\n{name}: {r['wall_s']:.1f} s (target < {TARGET_S:.0f} s), hidden {r['scaled']['hidden']}")
        print(f"  {'type':<14}{'F ms':>8}{'I ms':>8}{'W ms':>8}{'A2A ms':>8}{'cv F':>7}{'cv I':>7}{'cv W':>7}")
        for t, row in r["layers"].items():
            print(f"  {t:<14}{row['f_ms']:>8.2f}{row['i_ms']:>8.2f}{row['w_ms']:>8.2f}"
                  f"{row['a2a_f_ms'] + row['a2a_b_ms']:>8.2f}{row['cv_f']:>7.2f}{row['cv_i']:>7.2f}{row['cv_w']:>7.2f}")
        print(f"  {'pair (F / B)':<32}{'hidden':>8}{'OV ms':>9}{'serial ms':>11}{'cv':>6}")
        for k, row in r["pairs"].items():
            print(f"  {k:<32}{row['hidden_share']:>8.1%}{row['ov_ms']:>9.2f}{row['serial_ms']:>11.2f}{row['cv']:>6.2f}")
        for g, row in r["hidden_share_summary"].items():
            if row["pairs"]:
                print(f"  hidden share, {g.replace('_', ' ')}: mean {row['mean']:.1%} "
                      f"(min {row['min']:.1%}, max {row['max']:.1%}, {row['pairs']} pairs)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", choices=MODELS)
    ap.add_argument("--scale", type=float, help="Width scale for every model (default: per model, see MODELS).")
    ap.add_argument("--ep", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    names = [args.only] if args.only else list(MODELS)
    reqs = {name: ProfileRequest(scale=args.scale or MODELS[name], ep=args.ep, seq_len=args.seq_len,
                                 repeats=args.repeats, warmup=1) for name in names}
    results = {"machine": {"cpus": os.cpu_count(), "load_avg_before": os.getloadavg()[0]},
               "settings": {"scale": {n: r.scale for n, r in reqs.items()}, "ep": args.ep,
                            "seq_len": args.seq_len, "repeats": args.repeats, "warmup": 1, "device": "cpu"},
               "models": {name: run(name, req) for name, req in reqs.items()}}
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
    else:
        _print(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
