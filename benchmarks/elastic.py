"""Re-planning after lost GPUs: ``replan_gpus`` (what ``ppplan replan --lost-ranks`` calls) on
shipped models losing one GPU, one node of 8, and 12.5% of the GPUs.

Old plans: the shipped default plans of Qwen3-Next-80B-A3B (64 GPUs) and Qwen3-235B-A22B
(128 GPUs), and DeepSeek-V3 planned for 1024 GPUs (``ppplan plan deepseek-v3 --gpus 1024
--work W``, made here, not timed); ``--only deepseek-v3-8192-lose1,deepseek-v3-8192-node``
adds DeepSeek-V3 at 8192 GPUs (not in the default run). Per case: GPUs before / available / used, degrees,
optimizer step before and after, tokens/s per GPU kept (over the old plan, and over the same
re-plan on all the old GPUs: ``_full``), bytes moved (by link) and the
predicted transfer time, whether the new plan validates, fits memory and keeps the global
batch, and the re-plan's wall and CPU time (the only machine-dependent figures; the rest
are deterministic under ``--work``). docs/replan.md gives the figures.

    python benchmarks/elastic.py [--json] [--work 3] [--only CASE,...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from planner.api import plan as make_plan
from planner.core.plan import load_plan_file
from planner.replanning.elastic import replan_gpus
from planner.simulation import validate_plan

PLANS = Path(__file__).resolve().parent.parent / "plans" / "examples"
_NODE = tuple(range(8, 16))
CASES = {
    "qwen3-next-lose1": ("qwen3-next-80b-a3b", (3,)),
    "qwen3-next-node": ("qwen3-next-80b-a3b", _NODE),
    "qwen3-next-12.5%": ("qwen3-next-80b-a3b", tuple(range(0, 64, 8))),
    "qwen3-235b-lose1": ("qwen3-235b-a22b", (5,)),
    "qwen3-235b-node": ("qwen3-235b-a22b", _NODE),
    "qwen3-235b-12.5%": ("qwen3-235b-a22b", tuple(range(16, 32))),
    "deepseek-v3-1024-lose1": ("deepseek-v3@1024", (5,)),
    "deepseek-v3-1024-node": ("deepseek-v3@1024", _NODE),
    "deepseek-v3-1024-12.5%": ("deepseek-v3@1024", tuple(range(0, 128))),
    "deepseek-v3-8192-lose1": ("deepseek-v3@8192", (5,)),
    "deepseek-v3-8192-node": ("deepseek-v3@8192", _NODE),
}
"""Case -> (old plan, lost global ranks): one GPU, a node, 12.5% (one GPU per node for
Qwen3-Next; whole nodes for the others)."""
DEFAULT = tuple(c for c in CASES if "8192" not in c)
"""Cases run without ``--only``: the 8192-GPU ones (re-plan time at scale) only on request."""


def _old_plan(name: str, work: float):
    if "@" in name:
        model, gpus = name.split("@")
        return make_plan(model, gpus=int(gpus), work=work)
    return load_plan_file(PLANS / f"{name}.default.plan.json")


def _full(old, work: float) -> float:
    """Tokens/s per GPU of the same re-plan on every GPU of the old plan (no GPU lost): the
    degree search's own figure at full size, so that losing GPUs is told apart from choosing
    other degrees than the old plan's."""
    return replan_gpus(old, gpus=int(old.cluster.num_gpus), work=work).plan.predicted.tokens_per_s_per_gpu


def _row(case: str, old, lost: tuple[int, ...], work: float, full: float) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    r = replan_gpus(old, lost_ranks=lost, work=work)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    new, s, m = r.plan, r.plan.extra["replan"], r.plan.extra["migration"]
    return {"case": case, "model": old.model.name, "lost": len(lost),
            **{k: s[k] for k in ("gpus_before", "gpus_available", "gpus_used", "degrees_before", "degrees_after",
                                 "global_batch_before", "global_batch_after", "step_before_s", "step_after_s",
                                 "tokens_per_s_per_gpu_before", "tokens_per_s_per_gpu_after",
                                 "throughput_per_gpu_kept")},
            "tokens_per_s_per_gpu_full": full,
            "throughput_per_gpu_kept_vs_full": new.predicted.tokens_per_s_per_gpu / full,
            "bytes_moved": m["bytes_moved"], "link_bytes": m["link_bytes"], "migration_s": m["seconds"],
            "valid": validate_plan(new) == [],
            "fits_memory": max(new.predicted.peak_memory_bytes) <= new.memory_limit_bytes,
            "batch_kept": s["global_batch_after"] == s["global_batch_before"],
            "layout": m["reload"]["layout"], "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--work", type=float, default=3.0, help="--work of each re-plan (and of the 1024-GPU plan)")
    ap.add_argument("--only", help="comma-separated case names")
    args = ap.parse_args(argv)
    chosen = args.only.split(",") if args.only else list(DEFAULT)
    started = time.perf_counter()
    olds: dict = {}
    rows = []
    for case in chosen:
        name, lost = CASES[case]
        if name not in olds:
            old = _old_plan(name, args.work)
            olds[name] = (old, _full(old, args.work))
        rows.append(_row(case, *olds[name][:1], lost, args.work, olds[name][1]))
    summary = {"all_valid": all(r["valid"] for r in rows), "all_fit": all(r["fits_memory"] for r in rows),
               "all_batch_kept": all(r["batch_kept"] for r in rows),
               "max_wall_s_1024": max((r["wall_s"] for r in rows if r["gpus_before"] == 1024), default=None),
               "max_cpu_s_1024": max((r["cpu_s"] for r in rows if r["gpus_before"] == 1024), default=None),
               "max_wall_s_8192": max((r["wall_s"] for r in rows if r["gpus_before"] == 8192), default=None),
               "max_cpu_s_8192": max((r["cpu_s"] for r in rows if r["gpus_before"] == 8192), default=None),
               "wall_s": round(time.perf_counter() - started, 1)}
    out = {"work": args.work, "rows": rows, "summary": summary}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print("case                      GPUs before>used  step before>after   kept  vs full  moved GB   move s  wall s  cpu s")
    for r in rows:
        print(f"{r['case']:<25} {r['gpus_before']:>5} > {r['gpus_used']:<5}   {r['step_before_s']:>7.2f} > "
              f"{r['step_after_s']:<7.2f} {r['throughput_per_gpu_kept']:>6.1%} {r['throughput_per_gpu_kept_vs_full']:>7.1%} "
              f"{r['bytes_moved'] / 1e9:>9.0f} "
              f"{r['migration_s']:>7.2f} {r['wall_s']:>7.2f} {r['cpu_s']:>6.2f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
