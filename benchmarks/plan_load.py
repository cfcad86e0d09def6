"""Loading and validating a large plan: ``Plan.from_dict`` and ``validate_plan`` on 262,144 actions.

A plan of the shipped default model is made once (``--work 1``), then its schedule is
replaced by a split-backward 1F1B order of as many microbatches as give about 262,144
actions (the size a DeepSeek-V3 pp 32 plan with 2,730 microbatches has), and the JSON
file is loaded (read, schema, action check, parse, consistency) and validated
(``ppplan validate``'s check) ``--reps`` times. CPU seconds (``time.process_time``) are
reported beside wall seconds, so the figure does not move with machine load.

    python benchmarks/plan_load.py --json [--actions 262144] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from planner.api import plan
from planner.core.plan import load_plan_file
from planner.core.schedule import format_schedule
from planner.simulation import validate_plan
from solvers.schedule.families.generators import one_f_one_b


def big_plan_file(actions: int, path: Path) -> int:
    """Write a valid plan with about ``actions`` actions to ``path``; returns the count."""
    base = plan("llama3-8b", pp=8, schedule="1f1b", work=1.0).to_dict()
    pp = base["parallel"]["pp"]
    m = max(1, actions // (3 * pp))
    sched = format_schedule(one_f_one_b(pp, m, split_w=True))
    base["schedule"], base["microbatches"]["count"] = sched, m
    path.write_text(json.dumps(base))
    return sum(len(v) for v in sched.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--actions", type=int, default=262_144)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.plan.json"
        count = big_plan_file(args.actions, path)
        for _ in range(args.reps):
            w0, c0 = time.perf_counter(), time.process_time()
            p = load_plan_file(path)
            w1, c1 = time.perf_counter(), time.process_time()
            problems = validate_plan(p)
            w2, c2 = time.perf_counter(), time.process_time()
            rows.append({"load_wall_s": w1 - w0, "load_cpu_s": c1 - c0, "validate_wall_s": w2 - w1,
                         "validate_cpu_s": c2 - c1, "valid": not problems, "load": os.getloadavg()[0]})
    best = min(rows, key=lambda r: r["load_cpu_s"] + r["validate_cpu_s"])
    out = {"benchmark": "plan_load", "actions": count, "bytes": path.stat().st_size if path.exists() else None,
           "best_load_cpu_s": best["load_cpu_s"], "best_validate_cpu_s": best["validate_cpu_s"], "reps": rows}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{count} actions: load {best['load_cpu_s']:.3f} CPU s, validate {best['validate_cpu_s']:.3f} CPU s "
              f"(best of {len(rows)}; load average {best['load']:.1f})")


if __name__ == "__main__":
    main()
