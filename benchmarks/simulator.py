"""Simulator throughput: actions per second of ``simulate`` and of re-timing alone.

Per case (1F1B with split W, interleaved 1F1B vpp 2, fused 1F1B-overlap; pp 8-32, M 64-1024),
the best of ``--repeat`` runs of: ``full`` (``simulate``: compilation and one timing pass;
memory trace and critical path computed when first read, [Note: detail on read] in
``planner.core.simulate``), ``full_detail`` (the same, then reading both), ``retime``
(``simulate_compiled``: what a solver pays per candidate partition of a fixed schedule
shape) and ``compile`` alone. The target is ``TARGET``; docs/simulator.md gives the figures.

    python benchmarks/simulator.py [--json] [--quick] [--repeat N] [--clock wall|cpu]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable

from planner.core.costs import P2PCost
from planner.core.placement import stage_ranks
from planner.core.schedule import Schedule
from planner.core.simulate import SimResult, compile_schedule, simulate, simulate_compiled
from planner.core.stage_costs import StageCosts
from solvers.schedule.families.generators import interleaved_1f1b, one_f_one_b

TARGET = 1e6
"""Actions per second the simulator is to reach."""

SHAPES: dict[str, tuple[int, Callable[[int, int], Schedule]]] = {
    "1f1b-splitw": (1, lambda pp, m: one_f_one_b(pp, m, split_w=True)),
    "interleaved-v2": (2, lambda pp, m: interleaved_1f1b(pp, 2, m)),
    "1f1b-overlap": (1, lambda pp, m: one_f_one_b(pp, m, fuse=True)),
}
"""Name -> (vpp, generator)."""


def stage_costs_for(pp: int, vpp: int, seed: int = 0) -> StageCosts:
    """Deterministic random stage costs with fused pairs for stages sharing a rank."""
    rng = random.Random(seed)
    n = pp * vpp
    ranks = stage_ranks(n, pp)
    f = tuple(rng.uniform(1e-3, 2e-3) for _ in range(n))
    i = tuple(rng.uniform(1e-3, 3e-3) for _ in range(n))
    fused = {(a, b): 0.8 * (f[a] + i[b]) for a in range(n) for b in range(n) if ranks[a] == ranks[b]}
    return StageCosts(f=f, i=i, w=tuple(rng.uniform(5e-4, 1e-3) for _ in range(n)),
                      act_bytes=(1 << 28,) * n, act_w_bytes=(1 << 26,) * n,
                      static_bytes=(1 << 33,) * n, out_bytes=(1 << 24,) * n, ranks=tuple(ranks),
                      fused=fused, p2p=P2PCost(latency_s=1e-5, bandwidth=5e10))


_CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _best(fn: Callable[[], object], repeat: int, clock: str = "wall") -> float:
    now = _CLOCKS[clock]
    best = float("inf")
    for _ in range(repeat):
        t0 = now()
        fn()
        best = min(best, now() - t0)
    return best


def run_case(shape: str, pp: int, m: int, repeat: int, clock: str = "wall") -> dict:
    """Time one (schedule shape, pp, M)."""
    vpp, make = SHAPES[shape]
    sched = make(pp, m)
    costs = stage_costs_for(pp, vpp)
    n_actions = sum(len(v) for v in sched.values())
    comp = compile_schedule(sched, costs.num_stages, costs.ranks)
    simulate_compiled(comp, costs)  # warm-up: the first timing after compiling
    t_compile = _best(lambda: compile_schedule(sched, costs.num_stages, costs.ranks), repeat, clock)
    t_retime = _best(lambda: simulate_compiled(comp, costs), repeat, clock)
    t_full = _best(lambda: simulate(sched, costs), repeat, clock)
    t_detail = _best(lambda: _read_detail(simulate(sched, costs)), repeat, clock)
    return {"schedule": shape, "pp": pp, "vpp": vpp, "microbatches": m, "actions": n_actions,
            "compile_s": t_compile, "retime_s": t_retime, "full_s": t_full, "full_detail_s": t_detail,
            "compile_actions_per_s": n_actions / t_compile,
            "retime_actions_per_s": n_actions / t_retime,
            "full_actions_per_s": n_actions / t_full,
            "full_detail_actions_per_s": n_actions / t_detail}


def _read_detail(sim: SimResult) -> tuple[list, list]:
    """Read the fields ``simulate`` computes on first read."""
    return sim.memory, sim.critical_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--quick", action="store_true", help="pp 8, 16 and M 64, 256 only")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (best kept)")
    parser.add_argument("--clock", choices=sorted(_CLOCKS), default="wall",
                        help="wall time, or this process's CPU time (steadier on a shared machine)")
    args = parser.parse_args(argv)
    pps, ms = ((8, 16), (64, 256)) if args.quick else ((8, 16, 32), (64, 256, 1024))
    cases = [run_case(shape, pp, m, args.repeat, args.clock) for shape in SHAPES for pp in pps for m in ms]
    total = sum(c["actions"] for c in cases)
    summary = {
        "target_actions_per_s": TARGET,
        "total_actions": total,
        "full_actions_per_s": total / sum(c["full_s"] for c in cases),
        "full_detail_actions_per_s": total / sum(c["full_detail_s"] for c in cases),
        "retime_actions_per_s": total / sum(c["retime_s"] for c in cases),
        "compile_actions_per_s": total / sum(c["compile_s"] for c in cases),
        "min_full_actions_per_s": min(c["full_actions_per_s"] for c in cases),
        "min_full_detail_actions_per_s": min(c["full_detail_actions_per_s"] for c in cases),
        "min_retime_actions_per_s": min(c["retime_actions_per_s"] for c in cases),
    }
    summary["meets_target_full"] = summary["full_actions_per_s"] >= TARGET
    summary["meets_target_retime"] = summary["retime_actions_per_s"] >= TARGET
    if args.json:
        print(json.dumps({"benchmark": "simulator", "python": sys.version.split()[0], "clock": args.clock,
                          "summary": summary, "cases": cases}, indent=1))
        return 0
    print(f"{'schedule':<15} {'pp':>3} {'M':>5} {'actions':>8} {'compile/s':>10} "
          f"{'retime/s':>10} {'full/s':>10} {'+detail/s':>10}")
    for c in cases:
        print(f"{c['schedule']:<15} {c['pp']:>3} {c['microbatches']:>5} {c['actions']:>8} "
              f"{c['compile_actions_per_s']:>10.3g} {c['retime_actions_per_s']:>10.3g} "
              f"{c['full_actions_per_s']:>10.3g} {c['full_detail_actions_per_s']:>10.3g}")
    print(f"all cases: full {summary['full_actions_per_s']:.3g}/s (memory trace and critical path "
          f"read: {summary['full_detail_actions_per_s']:.3g}/s), retime "
          f"{summary['retime_actions_per_s']:.3g}/s, compile {summary['compile_actions_per_s']:.3g}/s"
          f" (target {TARGET:.0e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
