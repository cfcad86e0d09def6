"""ppplan side by side with the Zero Bubble repository's own heuristic, and with DualPipeV.

The peer is ``initial_solution`` of sail-sg/zero-bubble-pipeline-parallelism
(``megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py`` with its ``graph.py``):
``Graph.manual_order`` under its eight settings, each order re-timed with ppplan's simulator
on the same costs (``CASES``), beside ``best_schedule``, ``solvers.schedule.engines.zb_greedy`` and
the lower bound. Its code is not copied here: pass a clone with ``--zb-dir`` (without it the
benchmark says how to get one and exits 2). ``--dualpipev-only`` runs the DualPipeV table
alone (DeepSeek's order against ppplan's ``dualpipev``, ``dualpipev-list`` and ``auto``).
``--first-plan`` runs the time-to-first-plan table alone: each table written as the cost
file ``ppplan plan --profile`` reads, planned through ``planner.api.plan`` (what the command
calls) until its first plan is reported (``planner.progress.listening``), against the peer's
time when ``--zb-dir`` is given. docs/search-peers.md gives the method and the figures.

    python benchmarks/vs_zb.py --zb-dir /tmp/zb --json > result.json
    python benchmarks/vs_zb.py --zb-dir /tmp/zb --quick          # three cases, no DualPipeV
    python benchmarks/vs_zb.py --first-plan --zb-dir /tmp/zb --json   # seconds; the peer optional
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

from planner.core.costs import P2PCost
from planner.core.placement import stage_ranks
from planner.core.schedule import Schedule, parse_action
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from solvers.schedule.families.dualpipev_exact import dualpipev_exact
from solvers.schedule.search.lower_bound import step_lower_bound
from solvers.schedule.engines.memory_limit import MemoryLimit, rank_activation
from solvers.schedule.search.search import best_schedule, clear_memo
from solvers.schedule.engines.zb_greedy import zb_greedy_orders
from vs_zb_first import first_plan_summary, print_first, time_first_plan

PEER_FILES = "megatron/core/pipeline_parallel/zerobubble/scheduler"
PEER_GRAPH_MODULE = "megatron.core.pipeline_parallel.zerobubble.scheduler.graph"
HOW_TO_GET = f"""the Zero Bubble peer's code is needed and is not part of ppplan. Get it with
    git clone https://github.com/sail-sg/zero-bubble-pipeline-parallelism /tmp/zb-repo
and pass --zb-dir /tmp/zb-repo (or a folder holding its {PEER_FILES}/zb.py and graph.py)."""

MS = 1e-3
ACT = 2**30
P2P_S = 0.1 * MS
KINDS = {"W-heavy": (1.0, 1.0, 2.0), "B-heavy": (1.0, 2.0, 1.0)}
"""F/I/W in ms; the peer's B is ppplan's input-gradient I."""


@dataclass(frozen=True, kw_only=True)
class Case:
    """One cost table."""

    p: int
    """Stages, one per rank."""
    m: int
    """Microbatches."""
    kind: str
    """``W-heavy`` or ``B-heavy`` (``KINDS``)."""
    spread: bool
    """Each stage's times and activations scaled by 0.7..1.3 (seeded by p and M)."""
    mem: float
    """Activation memory per rank, in microbatches of that rank's activations."""


CASES = [
    Case(p=4, m=8, kind="W-heavy", spread=False, mem=2),
    Case(p=4, m=32, kind="B-heavy", spread=True, mem=12),
    Case(p=8, m=16, kind="W-heavy", spread=True, mem=8),
    Case(p=8, m=24, kind="B-heavy", spread=False, mem=16),
    Case(p=8, m=64, kind="W-heavy", spread=True, mem=24),
    Case(p=8, m=32, kind="B-heavy", spread=True, mem=4),
    Case(p=16, m=32, kind="W-heavy", spread=False, mem=24),
    Case(p=16, m=48, kind="B-heavy", spread=True, mem=32),
    Case(p=16, m=128, kind="W-heavy", spread=True, mem=8),
    Case(p=16, m=64, kind="B-heavy", spread=True, mem=48),
    Case(p=32, m=64, kind="W-heavy", spread=True, mem=32),
    Case(p=32, m=256, kind="B-heavy", spread=True, mem=64),
]
NAMED = Case(p=4, m=16, kind="W-heavy", spread=False, mem=8)
"""The case where the peer was seen on the lower bound and ppplan above it (tuned on:
reported apart from the twelve)."""
QUICK = [NAMED, CASES[3], CASES[4]]


def case_costs(case: Case) -> StageCosts:
    """The stage costs of ``case``: half of each stage's activations held until its W."""
    rnd = random.Random(case.p * 1000 + case.m)
    f, i, w = KINDS[case.kind]
    k = [rnd.uniform(0.7, 1.3) if case.spread else 1.0 for _ in range(case.p)]
    act = [int(ACT * (rnd.uniform(0.7, 1.3) if case.spread else 1.0)) for _ in range(case.p)]
    return StageCosts(f=tuple(f * MS * x for x in k), i=tuple(i * MS * x for x in k),
                      w=tuple(w * MS * x for x in k), act_bytes=tuple(act),
                      act_w_bytes=tuple(a // 2 for a in act), static_bytes=(0,) * case.p,
                      out_bytes=(0,) * case.p, ranks=tuple(range(case.p)), p2p=P2PCost(latency_s=P2P_S))


def load_peer(zb_dir: Path) -> tuple[types.ModuleType, types.ModuleType]:
    """The peer's ``graph`` and ``zb`` modules from ``zb_dir`` (a clone or a flat folder).

    ``zb.py`` imports ``torch`` (for one annotation) and ``pulp`` (only in
    ``create_scheduled_nodes``, which is not called here); where either is not installed an
    empty module stands in for it, so the code that runs is the peer's own."""
    folder = zb_dir / PEER_FILES if (zb_dir / PEER_FILES / "zb.py").exists() else zb_dir
    if not (folder / "zb.py").exists() or not (folder / "graph.py").exists():
        raise FileNotFoundError(f"no zb.py and graph.py under {zb_dir}")
    for name in ("torch", "pulp"):
        try:
            __import__(name)
        except ImportError:
            sys.modules[name] = types.ModuleType(name)
            sys.modules[name].Tensor = object  # the annotation zb.Graph.precede reads
    return _load(PEER_GRAPH_MODULE, folder / "graph.py"), _load("zb_peer", folder / "zb.py")


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def peer_orders(graph_mod, zb, costs: StageCosts, m: int, budget: list[int]) -> tuple[list[dict], float, float]:
    """The peer's eight ``manual_order`` runs as (settings, its span, schedule or error) and
    the CPU and wall seconds of all eight (what ``initial_solution`` runs), building the graph
    included."""
    p = costs.num_stages
    cfg = graph_mod.GraphConfig(
        mem_f=[float(a) for a in costs.act_bytes],
        mem_b=[-float(a - aw) for a, aw in zip(costs.act_bytes, costs.act_w_bytes)],
        mem_w=[-float(aw) for aw in costs.act_w_bytes], max_mem=[float(b) for b in budget],
        cost_f=list(costs.f), cost_b=list(costs.i), cost_w=list(costs.w), cost_comm=costs.p2p_time(0),
        n_stages=p, n_micro=m)
    out, t0, w0 = [], time.process_time(), time.perf_counter()
    graph = zb.Graph.build_graph(p, m, cfg)
    for a in (True, False):
        for b in (True, False):
            for c in (True, False):
                run = {"settings": [a, b, c]}
                try:
                    _, ends, span = graph.manual_order(allow_bubble_before_first_b=a, prioritize_b=b,
                                                       no_bubble_greedy=c)
                    run.update(span=span, ends=ends)
                except ValueError as exc:  # its "Cannot fit memory"
                    run["error"] = str(exc)
                out.append(run)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    for run in out:
        if "ends" in run:
            run["schedule"] = _peer_schedule(graph, run.pop("ends"), p, m)
    return out, cpu, wall


def _peer_schedule(graph, ends: list[float], p: int, m: int) -> Schedule:
    """Each stage's tasks in the order of their end times (as the peer's own
    ``create_scheduled_nodes`` orders them), in ppplan's text form."""
    sched = {}
    for s in range(p):
        keys = [(kind, mb) for kind in range(3) for mb in range(m)]
        keys.sort(key=lambda km: ends[graph.get_id(km[0], s, km[1])])
        sched[s] = [parse_action(f"{s}{'FIW'[kind]}{mb}") for kind, mb in keys]
    return sched


def _timed(costs: StageCosts, sched: Schedule, budget: list[int]) -> float | None:
    """ppplan's makespan of ``sched``; None when it exceeds ``budget`` on some rank."""
    sim = simulate(sched, costs)
    return None if any(peak > b for peak, b in zip(sim.peak_act_bytes, budget)) else sim.step_time


def _ppplan(costs: StageCosts, m: int, limit: MemoryLimit, work: float | None, polish: bool):
    clear_memo()  # each run draws its candidates afresh
    kw = {} if work is None else {"time_limit": work}
    c0, w0 = time.process_time(), time.perf_counter()
    ch = best_schedule(costs, microbatches=m, memory_limit=limit, polish=polish, **kw)
    return ch, time.process_time() - c0, time.perf_counter() - w0


def zb_case(case: Case, peer, work: float | None) -> dict:
    """One row of the side-by-side table."""
    costs = case_costs(case)
    limit = MemoryLimit(microbatches=case.mem)
    budget = limit.activation_limit(costs)
    runs, peer_cpu, _ = peer_orders(*peer, costs, case.m, budget)
    for run in runs:
        run["makespan_s"] = _timed(costs, run.pop("schedule"), budget) if "schedule" in run else None
    valid = [r for r in runs if r["makespan_s"] is not None]
    own = min((r for r in runs if "span" in r), key=lambda r: r["span"], default=None)
    c0 = time.process_time()
    mine = [(name, _timed(costs, s, budget)) for name, s in zb_greedy_orders(costs, case.m, budget)
            if not isinstance(s, str)]
    zg_cpu = time.process_time() - c0
    zg = min((t for _, t in mine if t is not None), default=None)
    heur, heur_cpu, heur_wall = _ppplan(costs, case.m, limit, work, polish=False)
    ours, cpu, wall = _ppplan(costs, case.m, limit, work, polish=True)
    lb = step_lower_bound(costs, case.m, activation_limit=budget)
    peer_best = min((r["makespan_s"] for r in valid), default=None)
    return {"p": case.p, "microbatches": case.m, "kind": case.kind, "spread": case.spread,
            "memory_microbatches": case.mem, "lower_bound_s": lb,
            "peer_best_s": peer_best, "peer_own_pick_s": own and own["makespan_s"], "peer_cpu_s": peer_cpu,
            "peer_variants": [{k: v for k, v in r.items()} for r in runs],
            "ppplan_s": ours.step_time, "ppplan_schedule": ours.name, "ppplan_status": ours.status,
            "ppplan_cpu_s": cpu, "ppplan_wall_s": wall,
            "heuristics_s": heur.step_time, "heuristics_schedule": heur.name,
            "heuristics_cpu_s": heur_cpu, "heuristics_wall_s": heur_wall,
            "zb_greedy_s": zg, "zb_greedy_cpu_s": zg_cpu,
            "ppplan_over_peer": None if peer_best is None else ours.step_time / peer_best,
            "zb_greedy_over_peer": None if peer_best is None or zg is None else zg / peer_best,
            "heuristics_cpu_over_peer_cpu": heur_cpu / peer_cpu if peer_cpu > 0 else None,
            **first_row(case, peer, work)}


REPEATS = 3
"""Runs of the peer and of ppplan's first plan per table in the first-plan comparison; each
side's best is compared (millisecond timings on a shared machine)."""


def first_row(case: Case, peer, work: float | None) -> dict:
    """Time to ppplan's first plan on the user's path (``vs_zb_first``) against the peer's
    ``initial_solution`` on the same table, best of ``REPEATS`` each, in this process."""
    costs = case_costs(case)
    row = {"p": case.p, "microbatches": case.m, "kind": case.kind, "spread": case.spread,
           "memory_microbatches": case.mem, **time_first_plan(costs, case.m, case.mem, work=work, repeats=REPEATS)}
    if peer is not None:
        budget = MemoryLimit(microbatches=case.mem).activation_limit(costs)
        timed = [peer_orders(*peer, costs, case.m, budget)[1:] for _ in range(REPEATS)]
        row["peer_first_cpu_s"], row["peer_first_wall_s"] = min(c for c, _ in timed), min(w for _, w in timed)
        row["first_cpu_over_peer_cpu"] = row["first_plan_cpu_s"] / row["peer_first_cpu_s"]
        row["first_wall_over_peer_wall"] = row["first_plan_wall_s"] / row["peer_first_wall_s"]
    return row


def warm_up() -> None:
    """One first plan before any is timed: the planner's lazy imports happen here, as the
    peer's modules are loaded before its timing starts."""
    time_first_plan(case_costs(NAMED), NAMED.m, NAMED.mem, repeats=1)


DV_SHAPES = [(4, 20), (8, 32), (16, 64)]


def v_costs(p: int) -> StageCosts:
    """2p stages in V placement, F/I/W 1 ms, fused pairs 0.75 x (F + I), P2P 0.1 ms; half of
    each stage's activations held until its W."""
    S = 2 * p
    ranks = stage_ranks(S, p, "v")
    f = i = w = (1.0 * MS,) * S
    fused = {(a, b): 0.75 * (f[a] + i[b]) for a in range(S) for b in range(S) if ranks[a] == ranks[b]}
    return StageCosts(f=f, i=i, w=w, act_bytes=(ACT,) * S, act_w_bytes=(ACT // 2,) * S,
                      static_bytes=(0,) * S, out_bytes=(0,) * S, ranks=tuple(ranks), fused=fused,
                      p2p=P2PCost(latency_s=P2P_S))


def dv_case(p: int, m: int, work: float | None) -> dict:
    """One row of the DualPipeV table; peaks in microbatches of each rank's activations."""
    costs = v_costs(p)
    act = rank_activation(costs)
    order = dualpipev_exact(p, m)
    sim = simulate(order, costs)
    peak_mb = max(x / a for x, a in zip(sim.peak_act_bytes, act))
    limit = MemoryLimit(microbatches=peak_mb)
    row = {"p": p, "microbatches": m, "deepseek_s": sim.step_time, "deepseek_peak_mb": peak_mb,
           "lower_bound_s": step_lower_bound(costs, m, activation_limit=limit.activation_limit(costs))}
    kw = {} if work is None else {"time_limit": work}
    for method in ("dualpipev", "dualpipev-list", "auto"):
        clear_memo()
        c0 = time.process_time()
        ch = best_schedule(costs, microbatches=m, method=method, memory_limit=limit, **kw)
        peak = simulate(ch.schedule, costs).peak_act_bytes
        row[method] = {"makespan_s": ch.step_time, "schedule": ch.name, "cpu_s": time.process_time() - c0,
                       "over_deepseek": ch.step_time / sim.step_time,
                       "peak_mb": max(x / a for x, a in zip(peak, act))}
    return row


def _ms(x: float | None) -> str:
    return "   -   " if x is None else f"{x / MS:7.2f}"


def print_tables(zb_rows: list[dict], dv_rows: list[dict]) -> None:
    print(f"{'p':>3} {'M':>4} {'kind':>8} {'sp':>2} {'mem':>4} | {'LB':>7} {'peer':>7} {'ppplan':>7} "
          f"{'zbgrdy':>7} {'first':>7} | {'peer':>6} {'ppplan':>6} {'first':>6} {'zbgrdy':>6} cpu s")
    for r in zb_rows:
        print(f"{r['p']:>3} {r['microbatches']:>4} {r['kind']:>8} {'y' if r['spread'] else 'n':>2} "
              f"{r['memory_microbatches']:>4g} | {_ms(r['lower_bound_s'])} {_ms(r['peer_best_s'])} "
              f"{_ms(r['ppplan_s'])} {_ms(r['zb_greedy_s'])} {_ms(r['first_plan_s'])} | {r['peer_cpu_s']:6.3f} "
              f"{r['ppplan_cpu_s']:6.2f} {r['first_plan_cpu_s']:6.3f} {r['zb_greedy_cpu_s']:6.3f}")
    print_first(zb_rows)
    for r in dv_rows:
        print(f"DualPipeV p {r['p']} N {r['microbatches']}: DeepSeek {_ms(r['deepseek_s'])} ms, "
              + ", ".join(f"{k} {_ms(r[k]['makespan_s'])} ms ({r[k]['over_deepseek']:.3f}x)"
                          for k in ("dualpipev", "dualpipev-list", "auto"))
              + f", LB {_ms(r['lower_bound_s'])} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zb-dir", type=Path,
                    help="a local copy of the Zero Bubble repository (or of its scheduler folder)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("--quick", action="store_true", help="three cases, no DualPipeV table")
    ap.add_argument("--dualpipev-only", action="store_true", help="only the DualPipeV table (no peer needed)")
    ap.add_argument("--first-plan", action="store_true",
                    help="only the time-to-first-plan table (the peer optional: without it, ppplan's side alone)")
    ap.add_argument("--work", type=float, default=None, help="ppplan's work budget (default: best_schedule's)")
    args = ap.parse_args(argv)
    peer = None
    if args.first_plan:
        return _first_plan_only(args)
    if not args.dualpipev_only:
        try:
            peer = load_peer(args.zb_dir) if args.zb_dir else None
        except FileNotFoundError as exc:
            print(f"{exc}; {HOW_TO_GET}", file=sys.stderr)
            return 2
        if peer is None:
            print(HOW_TO_GET, file=sys.stderr)
            return 2
    load = [os.getloadavg()]
    zb_rows, dv_rows = [], []
    if peer is not None:
        warm_up()
    for c in [] if peer is None else QUICK if args.quick else [NAMED, *CASES]:
        zb_rows.append(dict(zb_case(c, peer, args.work), tuned_on=c is NAMED))
        print(f"done: {c}", file=sys.stderr, flush=True)  # progress, the figures go to stdout
    for p, m in [] if args.quick else DV_SHAPES:
        dv_rows.append(dv_case(p, m, args.work))
        print(f"done: DualPipeV p {p} N {m}", file=sys.stderr, flush=True)
    load.append(os.getloadavg())
    if args.json:
        print(json.dumps({"loadavg_start_end": load, "work": args.work, "zero_bubble": zb_rows,
                          "first_plan_summary": first_plan_summary(zb_rows), "dualpipev": dv_rows}, indent=1))
    else:
        print_tables(zb_rows, dv_rows)
    return 0


def _first_plan_only(args) -> int:
    """``--first-plan``: the time-to-first-plan rows of every table, against the peer when given."""
    try:
        peer = load_peer(args.zb_dir) if args.zb_dir else None
    except FileNotFoundError as exc:
        print(f"{exc}; {HOW_TO_GET}", file=sys.stderr)
        return 2
    load, c0 = [os.getloadavg()], time.process_time()
    warm_up()
    rows = [dict(first_row(c, peer, args.work), tuned_on=c is NAMED) for c in [NAMED, *CASES]]
    load.append(os.getloadavg())
    if args.json:
        print(json.dumps({"loadavg_start_end": load, "work": args.work, "peer": peer is not None,
                          "cpu_s": time.process_time() - c0, "first_plan": rows,
                          "first_plan_summary": first_plan_summary(rows)}, indent=1))
    else:
        print_first(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
