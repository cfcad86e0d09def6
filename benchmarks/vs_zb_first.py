"""Time to the first plan on the user's path, for ``benchmarks/vs_zb.py``.

A table's stage costs are written as the cost file ``ppplan plan --profile FILE --pp P
--microbatches M --memory-limit Xmicrobatches`` reads (one layer per stage), and planned through
``planner.api.plan``, the function that command calls. The plan is stopped once its first
plan is reported (``planner.progress.listening`` sees the ``first plan`` milestone): what
comes after cannot change when it came ([Note: first plan] in planner.planning.first_plan).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from planner.api import plan
from planner.core.stage_costs import StageCosts
from planner.progress import listening

__all__ = ["profile_of", "time_first_plan", "first_plan_summary", "print_first", "TARGET_RATIO", "TARGET_MAX_P"]

TARGET_RATIO = 2.0
"""The first plan within this many times the peer's time ..."""
TARGET_MAX_P = 16
"""... on tables with at most this many stages."""


class _Seen(BaseException):
    """Raised from the listener to stop the plan at its first plan (a BaseException, so no
    ``except Exception`` in the planner takes it for a failure)."""


def profile_of(costs: StageCosts) -> dict:
    """The cost file for ``costs`` (one stage per rank, no fused pairs): one layer per stage."""
    layers = [{"type": f"stage{s}", "f": costs.f[s], "i": costs.i[s], "w": costs.w[s],
               "act_bytes": costs.act_bytes[s], "act_w_bytes": costs.act_w_bytes[s],
               "out_bytes": costs.out_bytes[s]} for s in range(costs.num_stages)]
    return {"schema_version": 1, "kind": "ppplan.costs", "model": "vs-zb", "source": "user",
            "p2p": {"latency_s": costs.p2p.latency_s}, "layers": layers}


def _once(path: Path, pp: int, m: int, mem: float, work: float | None) -> dict:
    got: dict = {}

    def seen(event: str, fields) -> None:
        if event == "first plan":
            got.update(fields, cpu_s=time.process_time() - c0, wall_s=time.perf_counter() - w0)
            raise _Seen

    kw = {} if work is None else {"work": work}
    c0, w0 = time.process_time(), time.perf_counter()
    try:
        with listening(seen):
            plan(profile=str(path), pp=pp, microbatches=m, memory_limit=f"{mem:g}microbatches", **kw)
    except _Seen:
        pass
    return got


def time_first_plan(costs: StageCosts, m: int, mem: float, *, work: float | None = None,
                    repeats: int = 3) -> dict:
    """The first plan's schedule, step and the best CPU and wall seconds of ``repeats`` plans
    (from the ``planner.api.plan`` call to the milestone, loading the cost file included)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "costs.json"
        path.write_text(json.dumps(profile_of(costs)))
        runs = [_once(path, costs.num_ranks, m, mem, work) for _ in range(repeats)]
    if not runs[0]:
        return {"first_plan_s": None, "first_plan_schedule": None, "first_plan_cpu_s": None,
                "first_plan_wall_s": None}
    return {"first_plan_s": runs[0]["step_time_s"], "first_plan_schedule": runs[0]["schedule"],
            "first_plan_cpu_s": min(r["cpu_s"] for r in runs), "first_plan_wall_s": min(r["wall_s"] for r in runs)}


def first_plan_summary(rows: list[dict]) -> dict:
    """Cases within ``TARGET_RATIO`` of the peer's CPU (and wall) time, over the tables with
    p <= ``TARGET_MAX_P`` and over all, with the largest ratios."""
    out = {}
    for label, keep in ((f"p_le_{TARGET_MAX_P}", lambda r: r["p"] <= TARGET_MAX_P), ("all", lambda r: True)):
        sel = [r for r in rows if keep(r) and r.get("first_cpu_over_peer_cpu") is not None]
        cpu = [r["first_cpu_over_peer_cpu"] for r in sel]
        wall = [r["first_wall_over_peer_wall"] for r in sel]
        out[label] = {"cases": len(sel), "within_2x_cpu": sum(x <= TARGET_RATIO for x in cpu),
                      "within_2x_wall": sum(x <= TARGET_RATIO for x in wall),
                      "max_cpu_ratio": max(cpu, default=None), "max_wall_ratio": max(wall, default=None)}
    return out


def print_first(rows: list[dict]) -> None:
    """The time-to-first-plan table (each side's best of its runs)."""
    print(f"{'p':>3} {'M':>4} {'mem':>4} | {'first plan':>18} {'ms':>8} | {'cpu ms':>7} {'peer':>7} {'ratio':>6} | "
          f"{'wall ms':>7} {'peer':>7} {'ratio':>6}")
    for r in rows:
        ratio = (lambda k: "   -  " if r.get(k) is None else f"{r[k]:6.2f}")  # noqa: E731
        peer = (lambda k: "    -  " if r.get(k) is None else f"{1e3 * r[k]:7.2f}")  # noqa: E731
        print(f"{r['p']:>3} {r['microbatches']:>4} {r['memory_microbatches']:>4g} | {r['first_plan_schedule']:>18} "
              f"{1e3 * r['first_plan_s']:8.2f} | {1e3 * r['first_plan_cpu_s']:7.2f} {peer('peer_first_cpu_s')} "
              f"{ratio('first_cpu_over_peer_cpu')} | {1e3 * r['first_plan_wall_s']:7.2f} {peer('peer_first_wall_s')} "
              f"{ratio('first_wall_over_peer_wall')}")
