"""Overlap-aware partition vs the baselines, on the shipped models.

Per case (``CASES``; dp follows from pp on the model's shipped cluster) and memory limit
(``default``: the cluster's; ``relaxed``: ``RELAXED_GIB``, which isolates the partition
choice from memory), the predicted step of ``uniform``, ``flops_balanced``,
``serial_balanced`` and the plan (same simulator, schedule, microbatches and the
recomputation mode the plan chose), the plan's speedup, its solve time and memory margin;
for vpp 1 the bound on every partition (``any_partition_bounds``) and, where a pp <= 4 plan
ties serial_balanced, ``neighbourhood_sweep``. Targets: the plan is never slower than a
baseline that fits memory, and ``solve_target_s``. docs/partition.md gives the figures.

    python benchmarks/partition.py [--json] [--only MODEL] [--memory default|relaxed|both]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

from planner.api import plan, resolve_cluster
from planner.core.costs import CostTable
from planner.core.errors import InfeasibleError
from planner.core.hf_config import load_model
from planner.core.stage_costs import stage_costs
from profiler.analytical import analytical_costs
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.partition.bound import partition_lower_bound
from solvers.schedule.search.search import best_schedule

CASES = [("qwen3-next-80b-a3b", 4, 1), ("qwen3-next-80b-a3b", 8, 1), ("qwen3-next-80b-a3b", 16, 1),
         ("qwen3-235b-a22b", 8, 1), ("qwen3-235b-a22b", 8, 2), ("qwen3-235b-a22b", 16, 1),
         ("qwen3-235b-a22b", 16, 2), ("deepseek-v3", 8, 1), ("deepseek-v3", 16, 1), ("llama3-8b", 4, 1)]
"""(model, pp, vpp)."""
BASELINES = ("uniform", "flops_balanced", "serial_balanced")
RELAXED_GIB = 4096.0
GIB = 2 ** 30


def solve_target_s(pp: int, vpp: int) -> float | None:
    """The solve-time target of a case: 10 s for pp <= 8, 60 s for pp 16 vpp 2 (None elsewhere)."""
    if pp <= 8:
        return 10.0
    return 60.0 if vpp == 2 else None


def mode_tables(model: str, pp: int) -> dict[str, CostTable]:
    """Recomputation mode -> the analytical cost table the planner screens for it."""
    spec = load_model(model)
    cl = resolve_cluster(spec, None, pp=pp)
    return {mode: analytical_costs(spec, cl.with_recompute(mode)) for mode in cl.training.recompute_modes()}


def any_partition_bounds(tables: dict[str, CostTable], pp: int, microbatches: int,
                         limit: int | None) -> dict[str, float | None]:
    """Recomputation mode -> lower bound on the step of every one-stage-per-rank partition
    at this microbatch count and memory limit (``solvers.partition.bound``; None when no
    partition holds one microbatch per stage)."""
    out: dict[str, float | None] = {}
    for mode, table in tables.items():
        try:
            out[mode] = partition_lower_bound(table, pp=pp, microbatches=microbatches,
                                              memory_limit_bytes=limit).step_s
        except InfeasibleError:
            out[mode] = None
    return out


NEIGHBOURHOOD = 2
"""Boundary shift (layers) of the local sweep around a plan that ties serial_balanced."""


def neighbourhood_sweep(tables: dict[str, CostTable], pp: int, microbatches: int, limit: int | None,
                        cuts: list[int]) -> dict:
    """Every partition with each boundary within ``NEIGHBOURHOOD`` layers of ``cuts``, under
    every recomputation mode, scheduled with the best heuristic (no CP-SAT): the fastest."""
    mem = None if limit is None else MemoryLimit(bytes=limit)
    tried, best = 0, (float("inf"), None, None)
    shifts = range(-NEIGHBOURHOOD, NEIGHBOURHOOD + 1)
    for mode, table in tables.items():
        for delta in itertools.product(shifts, repeat=len(cuts)):
            edges = [0, *(c + d for c, d in zip(cuts, delta)), table.num_layers]
            if any(a >= b for a, b in zip(edges, edges[1:])):
                continue
            bounds = list(zip(edges, edges[1:]))
            tried += 1
            try:
                choice = best_schedule(stage_costs(table, bounds, list(range(pp))), microbatches=microbatches,
                                       memory_limit=mem, polish=False)
            except InfeasibleError:
                continue
            if choice.step_time < best[0]:
                best = (choice.step_time, mode, [b - a for a, b in bounds])
    return {"shift_layers": NEIGHBOURHOOD, "partitions_x_modes": tried, "fastest_s": best[0],
            "fastest_recompute": best[1], "fastest_stage_layers": best[2]}


def run_case(model: str, pp: int, vpp: int, memory: str) -> dict:
    """Plan one case and collect its row."""
    row = {"model": model, "pp": pp, "vpp": vpp, "memory": memory}
    t0 = time.perf_counter()
    try:
        p = plan(model, pp=pp, vpp=vpp, memory_gib=RELAXED_GIB if memory == "relaxed" else None)
    except InfeasibleError as exc:
        return {**row, "status": "infeasible", "reason": str(exc), "solve_s": time.perf_counter() - t0}
    solve = time.perf_counter() - t0
    step = p.predicted["step_time_s"]
    limit = p.memory_limit_bytes
    peak = max(p.predicted["peak_memory_bytes"])
    base = {k: p.baselines[k] for k in BASELINES}
    fits = {k: bool(b.get("fits_memory")) for k, b in base.items()}
    times = {k: b.get("step_time_s") for k, b in base.items()}
    target = solve_target_s(pp, vpp)
    out = {
        **row, "status": "ok", "tp": p.parallel["tp"], "dp": p.parallel["dp"],
        "microbatches": p.num_microbatches, "schedule": p.solver["schedule"],
        "recompute": p.cluster["training"]["recompute"],
        "step_s": {**times, "plan": step},
        "fits_memory": fits,
        "speedup": {k: (t / step if t else None) for k, t in times.items()},
        "plan_never_slower": all(step <= t * (1 + 1e-9) for k, t in times.items() if t and fits[k]),
        "solve_s": solve, "solve_target_s": target,
        "solve_ok": target is None or solve < target,
        "partition_solver": p.solver["name"], "partition_status": p.solver["status"],
        "memory_limit_gib": limit / GIB if limit else None,
        "memory_margin_gib": (limit - peak) / GIB if limit else None,
        "plan_stage_layers": [b - a for a, b in p.bounds()],
        "serial_stage_layers": [b - a for a, b in base["serial_balanced"].get("stages", [])],
    }
    if vpp != 1:
        return out
    tables = mode_tables(model, pp)
    out.update(_headroom(tables, pp, p.num_microbatches, limit, p.cluster["training"]["recompute"],
                         times["serial_balanced"], step))
    if pp <= 4 and times["serial_balanced"] and step >= times["serial_balanced"] * 0.995:
        # a tie: is any nearby partition faster? (pp <= 4 keeps the sweep to 5^3 partitions per mode)
        out["neighbourhood"] = neighbourhood_sweep(tables, pp, p.num_microbatches, limit,
                                                   [a for a, _ in p.bounds()][1:])
    return out


def _headroom(tables: dict[str, CostTable], pp: int, m: int, limit: int | None, mode: str,
              serial: float | None, step: float) -> dict:
    """How much faster than serial_balanced any partition could be at all (vpp 1 rows): the
    partition-free bound under the plan's recomputation mode and under any mode."""
    bounds = any_partition_bounds(tables, pp, m, limit)
    same = bounds.get(mode)
    return {"any_partition_bound_s": bounds, "serial_over_bound_same_recompute": serial / same
            if serial and same else None, "plan_over_bound_same_recompute": step / same if same else None}


def _table(rows: list[dict]) -> str:
    head = (f"{'model':<20}{'pp':>3}{'vpp':>4} {'mem':<8}{'M':>4} {'schedule':<13}"
            f"{'uniform':>9}{'flops':>9}{'serial':>9}{'plan':>9} {'x serial':>8}{'solve s':>8}{'margin':>8}")
    lines = [head]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"{r['model']:<20}{r['pp']:>3}{r['vpp']:>4} {r['memory']:<8} infeasible: "
                         f"{r['reason'][:80]}")
            continue
        s = r["step_s"]
        cell = lambda k: f"{s[k]:9.3f}" + ("" if k == "plan" or r["fits_memory"][k] else "*")  # noqa: E731
        sp = r["speedup"]["serial_balanced"]
        lines.append(f"{r['model']:<20}{r['pp']:>3}{r['vpp']:>4} {r['memory']:<8}{r['microbatches']:>4} "
                     f"{r['schedule']:<13}{cell('uniform')}{cell('flops_balanced')}{cell('serial_balanced')}"
                     f"{cell('plan')} {sp:8.3f}{r['solve_s']:8.1f}{r['memory_margin_gib']:8.1f}")
    lines.append("* = does not fit the memory limit")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--only", help="run only this model")
    ap.add_argument("--memory", choices=["default", "relaxed", "both"], default="both")
    args = ap.parse_args(argv)
    modes = ["default", "relaxed"] if args.memory == "both" else [args.memory]
    rows = [run_case(m, pp, vpp, mode) for mode in modes for m, pp, vpp in CASES
            if args.only in (None, m)]
    ok = [r for r in rows if r["status"] == "ok"]
    summary = {"plan_never_slower": all(r["plan_never_slower"] for r in ok),
               "solve_targets_met": all(r["solve_ok"] for r in ok)}
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=1))
    else:
        print(_table(rows))
        print(json.dumps(summary))
    return 0 if summary["plan_never_slower"] else 1


if __name__ == "__main__":
    sys.exit(main())
