"""ppplan's partition against the auto-partitioner proposed for torch.distributed.pipelining.

The peer is re-derived from pytorch PR #179212 / torchtitan PR #2113
(``benchmarks/torch_autopartition.py``: balanced F+B DP over pp x vpp stages, then boundary
moves around the critical stage, each scored by a simulator). Per case (model, pp, vpp,
microbatches M of the shipped micro-batch size, the global batch set to match): ppplan's plan (``planner.api.plan`` with the schedule fixed to ``1f1b`` for
vpp 1 and ``interleaved`` for vpp 2, the default memory limit) gives the stage bounds and the
recomputation mode; the peer partitions the same cost table (F + B per layer). Both are scored
by ppplan's simulator on the same generated order (``solvers.schedule.families.registry.generate``)
and ``stage_costs``. The peer's critical stage is the stage with the most time on ppplan's
critical path (``SimResult.critical_path``) between its first backward and its last forward
(the steady phase: ``solvers.partition.virtual_moves.critical_stage``, which ppplan's own
search uses too); the peer has no memory model, so each result says whether it fits
(``MemoryLimit.fits``). Summary: the cases where the peer is faster and fits.

    python benchmarks/vs_torch_partition.py [--json] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

from planner.api import plan, resolve_cluster
from planner.core.costs import CostTable
from planner.core.errors import InfeasibleError, InputError
from planner.core.hf_config import load_model
from planner.core.placement import Bounds, stage_ranks
from planner.core.simulate import Compiled, compile_schedule, simulate_compiled
from planner.core.stage_costs import stage_costs
from profiler.analytical import analytical_costs
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.partition.virtual_moves import critical_stage
from solvers.schedule.families.registry import generate

MODELS = ("llama3-8b", "qwen3-30b-a3b", "qwen3-next-80b-a3b", "qwen3-235b-a22b", "deepseek-v3")
PPS = (4, 8, 16)
VPPS = (1, 2)
QUICK = [("llama3-8b", 8, 2, 16), ("llama3-8b", 4, 2, 8), ("qwen3-30b-a3b", 4, 2, 16)]
"""(model, pp, vpp, M) of ``--quick``: the issue's worst case and two small ones."""
GENERATED = (0, 1, 2)
"""Seeds of the generated tables (``generated_table``)."""
GIB = 2 ** 30
SCHEDULE = {1: "1f1b", 2: "interleaved"}


def peer_module():
    """``benchmarks/torch_autopartition.py`` (the folder is not a package)."""
    path = Path(__file__).resolve().parent / "torch_autopartition.py"
    spec = importlib.util.spec_from_file_location("torch_autopartition", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["torch_autopartition"] = mod
    spec.loader.exec_module(mod)
    return mod


def model_cluster(model: str, pp: int, m: int):
    """The model's shipped cluster with ``pp`` and the global batch set to ``m`` microbatches
    of the shipped micro-batch size per replica (so the per-layer costs do not depend on m)."""
    spec = load_model(model)
    cl = resolve_cluster(spec, None, pp=pp)
    return spec, resolve_cluster(spec, None, pp=pp,
                                 global_batch=m * cl.training.micro_batch_size * cl.parallel.dp)


def model_table(model: str, pp: int, m: int, mode: str) -> CostTable:
    """The analytical table of ``model`` on ``model_cluster`` with ``mode`` recomputation
    (as ``benchmarks/partition.py`` builds it)."""
    spec, cl = model_cluster(model, pp, m)
    return analytical_costs(spec, cl.with_recompute(mode))


def generated_table(seed: int, layers: int = 24) -> CostTable:
    """A seeded heterogeneous table (``tests/partition_helpers.random_table``)."""
    path = Path(__file__).resolve().parents[1] / "tests" / "partition_helpers.py"
    spec = importlib.util.spec_from_file_location("partition_helpers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.random_table(seed, layers)


def score(table: CostTable, comp: Compiled, bounds: Bounds, ranks: list[int],
          limit: MemoryLimit | None) -> dict:
    """Step time, peak memory, fit and the steady-phase critical stage of ``bounds``."""
    sc = stage_costs(table, bounds, ranks)
    sim = simulate_compiled(comp, sc)
    crit = critical_stage(sim)
    peak = max(sim.peak_memory_bytes)
    return {"step_s": sim.step_time, "peak_gib": peak / GIB, "critical_stage": crit,
            "fits": limit is None or limit.fits(sc, sim.peak_memory_bytes)}


def peer_bounds(peer, table: CostTable, comp: Compiled, ranks: list[int]) -> tuple[Bounds, int]:
    """The peer's partition of ``table`` (F + B per layer) and how many it scored."""
    costs = [lc.serial_f + lc.serial_b for lc in table.layers]

    def peer_score(parts):
        r = score(table, comp, peer.to_bounds(parts), ranks, None)
        return r["step_s"], r["critical_stage"]
    parts, _, scored = peer.auto_partition(costs, len(ranks), peer_score)
    return peer.to_bounds(parts), scored


def compare(peer, table: CostTable, pp: int, vpp: int, m: int, bounds: Bounds, limit: int | None) -> dict:
    """Both partitions scored on the same generated order."""
    ranks = stage_ranks(pp * vpp, pp, "loop")
    comp = compile_schedule(generate(SCHEDULE[vpp], pp=pp, vpp=vpp, microbatches=m), pp * vpp, ranks)
    mem = None if limit is None else MemoryLimit(bytes=limit)
    t0 = time.perf_counter()
    pb, scored = peer_bounds(peer, table, comp, ranks)
    peer_s = time.perf_counter() - t0
    ours, theirs = score(table, comp, bounds, ranks, mem), score(table, comp, pb, ranks, mem)
    return {"ppplan": {**ours, "stage_layers": [b - a for a, b in bounds]},
            "peer": {**theirs, "stage_layers": [b - a for a, b in pb], "scored": scored, "solve_s": peer_s},
            "ratio_peer_over_ppplan": theirs["step_s"] / ours["step_s"],
            "peer_faster_and_fits": theirs["fits"] and theirs["step_s"] < ours["step_s"] * (1 - 1e-9),
            "memory_limit_gib": None if limit is None else limit / GIB}


def model_case(peer, model: str, pp: int, vpp: int, m: int) -> dict:
    """One shipped-model case: ppplan's plan, then both partitions scored."""
    row = {"model": model, "pp": pp, "vpp": vpp, "microbatches": m}
    t0 = time.perf_counter()
    try:
        _, cl = model_cluster(model, pp, m)
        p = plan(model, pp=pp, vpp=vpp, microbatches=m, schedule=SCHEDULE[vpp], global_batch=cl.training.global_batch)
    except (InfeasibleError, InputError) as exc:
        return {**row, "status": "skipped", "reason": str(exc).splitlines()[0]}
    row["plan_s"] = time.perf_counter() - t0
    mode = p.cluster["training"]["recompute"]
    table = model_table(model, pp, m, mode)
    return {**row, "status": "ok", "recompute": mode,
            **compare(peer, table, pp, vpp, m, [tuple(b) for b in p.bounds()], p.memory_limit_bytes)}


def generated_case(peer, seed: int, pp: int, vpp: int, m: int) -> dict:
    """One generated-table case, planned from the table itself (no memory limit)."""
    from planner.planning import PlanRequest, make_plan

    table = generated_table(seed)
    row = {"model": f"generated-{seed}", "pp": pp, "vpp": vpp, "microbatches": m}
    req = PlanRequest(pp=pp, vpp=vpp, microbatches=m, schedule=SCHEDULE[vpp])
    t0 = time.perf_counter()
    p = make_plan(table, req)
    row["plan_s"] = time.perf_counter() - t0
    return {**row, "status": "ok", "recompute": None,
            **compare(peer, table, pp, vpp, m, [tuple(b) for b in p.bounds()], None)}


def cases(quick: bool) -> list[tuple[str, int, int, int]]:
    """(model, pp, vpp, M) of the run; layers must fill pp x vpp stages."""
    if quick:
        return QUICK
    out = []
    for model in MODELS:
        n = load_model(model).num_layers
        out += [(model, pp, vpp, m) for pp in PPS for vpp in VPPS if pp * vpp <= n for m in (2 * pp, 4 * pp)]
    out += [(f"generated-{s}", pp, vpp, m) for s in GENERATED for pp in (4,) for vpp in VPPS
            for m in (2 * pp, 4 * pp)]
    return out


def summary(rows: list[dict]) -> dict:
    """Per vpp: cases, peer faster and fits, ppplan ahead, largest ratios."""
    out = {}
    for vpp in VPPS:
        ok = [r for r in rows if r["status"] == "ok" and r["vpp"] == vpp]
        if not ok:
            continue
        ratios = [r["ratio_peer_over_ppplan"] for r in ok]
        behind = [r for r in ok if r["peer_faster_and_fits"]]
        out[f"vpp{vpp}"] = {
            "cases": len(ok), "peer_faster_and_fits": len(behind),
            "ppplan_ahead": sum(1 for x in ratios if x > 1 + 1e-9),
            "max_peer_over_ppplan": max(ratios), "min_peer_over_ppplan": min(ratios),
            "peer_over_memory": sum(1 for r in ok if not r["peer"]["fits"]),
            "behind": [f"{r['model']} pp {r['pp']} vpp {r['vpp']} M {r['microbatches']}" for r in behind]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--quick", action="store_true", help="three vpp 2 cases only")
    args = ap.parse_args(argv)
    peer = peer_module()
    rows = []
    for model, pp, vpp, m in cases(args.quick):
        if model.startswith("generated-"):
            rows.append(generated_case(peer, int(model.split("-")[1]), pp, vpp, m))
        else:
            rows.append(model_case(peer, model, pp, vpp, m))
    summ = summary(rows)
    if args.json:
        print(json.dumps({"rows": rows, "summary": summ}, indent=1))
    else:
        for r in rows:
            if r["status"] != "ok":
                print(f"{r['model']:<20}{r['pp']:>3}{r['vpp']:>4}{r['microbatches']:>4}  skipped: {r['reason'][:70]}")
                continue
            pk = r["peer"]
            print(f"{r['model']:<20}{r['pp']:>3}{r['vpp']:>4}{r['microbatches']:>4} ppplan {r['ppplan']['step_s']:8.4f}"
                  f" peer {pk['step_s']:8.4f}{'' if pk['fits'] else '*'} ratio {r['ratio_peer_over_ppplan']:.4f}")
        print("* = does not fit the memory limit")
        print(json.dumps(summ))
    return 0 if all(v["peer_faster_and_fits"] == 0 for v in summ.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
