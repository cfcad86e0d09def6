"""What each framework's menu costs: the same model planned for every ``--target``.

For each shipped model, each target (torch, megatron, torchtitan, deepspeed) and vpp 1
and 2, ``planner.api.plan(model, target=..., vpp=...)`` with the model's shipped cluster;
the row holds the predicted step time (and its ratio to the torch target's, the full
search) and whether the target's exporter accepted the plan. "accepted" is checked by the
frameworks' own code in the tests (tests/test_targets_*.py); here it is ppplan's exporter.
A refused request (e.g. torchtitan for a model with MTP, DeepSpeed with vpp 2) is a row
with its one-line reason. Predicted times are the analytical model's (not measured).

    python benchmarks/targets.py --json [--work 3] [--models llama3-8b,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from planner.api import plan as api_plan
from planner.core.errors import InfeasibleError, InputError
from planner.core.targets import TARGET_NAMES
from planner.export import export_plan
from planner.export.schedule import ExportError

MODELS = ("llama3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3")


def row(model: str, target: str, vpp: int, time_limit: float) -> dict:
    """One (model, target, vpp) cell."""
    t0 = time.perf_counter()
    out = {"model": model, "target": target, "vpp": vpp}
    try:
        plan = api_plan(model, target=target, vpp=vpp, work=time_limit)
    except (InputError, InfeasibleError) as exc:
        return {**out, "status": "refused", "reason": str(exc), "wall_s": time.perf_counter() - t0}
    fmt = {"torch": "torch-csv"}.get(target, target)
    try:
        export_plan(plan, fmt)
        accepted = True
    except ExportError as exc:
        accepted = str(exc)
    return {**out, "status": "planned", "step_time_s": plan.predicted["step_time_s"],
            "schedule": plan.solver.get("schedule", plan.solver.get("name")),
            "recompute": plan.cluster.get("training", {}).get("recompute"),
            "pp": plan.pp, "microbatches": plan.num_microbatches, "export_accepted": accepted,
            "wall_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--work", dest="time_limit", type=float, default=3.0)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args(argv)
    rows = [row(m, t, v, args.time_limit) for m in args.models.split(",") for v in (1, 2) for t in TARGET_NAMES]
    full = {(r["model"], r["vpp"]): r.get("step_time_s") for r in rows if r["target"] == "torch"}
    for r in rows:
        base = full.get((r["model"], r["vpp"]))
        if r.get("step_time_s") and base:
            r["vs_torch"] = r["step_time_s"] / base
    if args.json:
        json.dump({"rows": rows, "time_limit_s": args.time_limit}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    for r in rows:
        text = (f"{r['step_time_s']:.4f} s  x{r.get('vs_torch', float('nan')):.3f}  export "
                f"{'ok' if r['export_accepted'] is True else 'REFUSED'}" if r["status"] == "planned"
                else f"refused: {r['reason']}")
        sys.stdout.write(f"{r['model']:<20} vpp {r['vpp']} {r['target']:<11} {text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
