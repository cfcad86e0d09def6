"""Mixed GPU fleets: the plan on two device groups against the faster group alone and an even layout.

For each (model, fleet) case, ``planner.api.plan(model, devices=FLEET)`` (what ``ppplan plan
MODEL --devices FLEET`` runs) with the model's shipped cluster's tp/cp/dp, and beside it:

- ``faster alone``: ``planner.api.plan(model, gpus=N, gpu=TYPE)`` (``ppplan plan MODEL --gpus N
  --gpu TYPE``): the best degrees the planner finds on the faster (or larger-memory) group's
  GPUs alone, same global batch;
- ``uniform``: the mixed plan's own ``uniform`` baseline: Megatron's even split of the decoder
  layers over every rank, under the plan's schedule and microbatches, simulated on each
  stage's own device.
- ``orders``: ``--devices-order search`` (every order of the groups planned, the fastest kept):
  each order's schedule step.

Step times: the optimizer step (schedule + exposed DP traffic + Adam) for the plan and the
faster group alone; the schedule step for the plan and its uniform baseline (same schedule).
Peak memory per rank beside its group's limit; plan wall and CPU seconds. Predicted by the
analytical model (emulated: no mixed fleet was run).

    python benchmarks/hetero.py --json [--work 1] [--cases llama3-8b/h100+a100,...]
"""

from __future__ import annotations

import argparse
import json
import time

from planner.api import plan as api_plan
from planner.core.errors import InfeasibleError, InputError

CASES = {
    "llama3-8b/h100+a100": ("llama3-8b", "h100:8,a100:8", "h100", 8),
    "llama3-8b/a100-80g+a100-40g": ("llama3-8b", "a100:8,a100:8:40", "a100", 8),
    "qwen3-30b-a3b/h100+a100": ("qwen3-30b-a3b", "h100:16,a100:16", "h100", 16),
    "qwen3-30b-a3b/a100-80g+a100-40g": ("qwen3-30b-a3b", "a100:16,a100:16:40", "a100", 16),
    "qwen3-235b-a22b/h100+a100": ("qwen3-235b-a22b", "h100:64,a100:64", "h100", 64),
}
"""Case -> (model, --devices, the faster or larger group's GPU type, its count)."""


def _timed(**kwargs):
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        plan = api_plan(**kwargs)
    except (InputError, InfeasibleError) as exc:
        return None, str(exc), time.perf_counter() - t0, time.process_time() - c0
    return plan, "", time.perf_counter() - t0, time.process_time() - c0


def row(name: str, work: float) -> dict:
    """One case: the mixed plan, the faster group alone, the uniform layout."""
    model, devices, alone_gpu, alone_n = CASES[name]
    plan, why, wall, cpu = _timed(model=model, devices=devices, work=work)
    out: dict = {"case": name, "model": model, "devices": devices}
    if plan is None:
        return {**out, "status": "refused", "reason": why}
    pred, stages = plan.predicted, plan.stages
    limits = plan.memory_limits
    uniform = plan.baselines["uniform"]
    out.update(status="planned", pp=plan.pp, dp=plan.parallel.dp, schedule=plan.solver.schedule,
               step_s=pred.step_time_s, optimizer_step_s=pred.optimizer_step_time_s,
               stage_devices=[s.device for s in stages], stage_layers=[s.layers[1] - s.layers[0] for s in stages],
               peak_gib=[p / 2**30 for p in pred.peak_memory_bytes], limit_gib=[c / 2**30 for c in limits],
               fits=all(p <= c for p, c in zip(pred.peak_memory_bytes, limits)),
               plan_wall_s=wall, plan_cpu_s=cpu,
               uniform_step_s=uniform.step_time_s,
               uniform_fits=(None if uniform.step_time_s is None else
                             all(p <= c for p, c in zip(uniform.peak_memory_bytes, limits))))
    alone, why, _, _ = _timed(model=model, gpus=alone_n, gpu=alone_gpu, work=work)
    out["alone"] = ({"status": "refused", "reason": why} if alone is None else
                    {"status": "planned", "gpus": alone_n, "gpu": alone_gpu, "pp": alone.pp,
                     "dp": alone.parallel.dp, "tp": alone.parallel.tp,
                     "optimizer_step_s": alone.predicted.optimizer_step_time_s})
    searched, why, _, _ = _timed(model=model, devices=devices, devices_order="search", work=work)
    out["orders"] = ([{"status": "refused", "reason": why}] if searched is None else
                     [{k: o.get(k) for k in ("devices", "status", "step_time_s")}
                      for o in searched.solver.other["device_orders"]])
    out["vs_alone"] = (None if alone is None else out["optimizer_step_s"] / alone.predicted.optimizer_step_time_s)
    out["vs_uniform"] = (None if uniform.step_time_s is None else out["step_s"] / uniform.step_time_s)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--work", type=float, default=1.0, help="search effort of every plan (ppplan plan --work)")
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args(argv)
    rows = [row(c, args.work) for c in args.cases.split(",")]
    if args.json:
        print(json.dumps({"work": args.work, "rows": rows}, indent=1))
        return 0
    for r in rows:
        if r["status"] != "planned":
            print(f"{r['case']}: refused: {r['reason']}")
            continue
        print(f"{r['case']}: step {r['step_s']:.3f} s (uniform {r['uniform_step_s']} s), optimizer step "
              f"{r['optimizer_step_s']:.3f} s (plan / alone {r['vs_alone']}), layers {r['stage_layers']}, "
              f"fits {r['fits']}, {r['plan_wall_s']:.1f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
