"""Replay plans on this machine (gloo, one process per pipeline rank) and compare the
measured step time and MFU with the prediction (issue 6's figures).

The flow is the one a user follows with ``ppplan profile`` -> ``ppplan plan --profile``
-> ``ppplan replay``, at a reduced width of Qwen3-Next-80B-A3B (heterogeneous: Gated
DeltaNet + MoE, full attention + MoE, an MTP layer, embedding, head):

1. *profile here*: one replay of a uniform plan re-predicts it, which measures F, I, W
   and the full backward B of every layer type on this CPU with torch's own pipeline
   backward functions (``planner.replay.costs_here``), and the pipeline P2P link;
2. *plan*: ``make_plan`` on that measured table (1F1B, which runs full backwards, so
   each layer's I and W are scaled to sum to its measured B) with the overlap-aware
   partition, and the same request with ``partition=serial`` and ``uniform``;
3. *replay* each plan: the plan says it was measured on this device at this width, so
   the replay copies its prediction (no re-prediction) and reports the error.

On this CPU nothing overlaps (torch runs ``OVERLAP_F_B`` halves one after the other,
and with every expert local there is no all-to-all), so the measured table has no pair
costs and the overlap-aware partition can only coincide with or tie ``serial_balanced``;
``uniform`` is the baseline that differs. 4 stages would put 4 processes on 2 cores,
which is not an honest timing, so they run only where the machine has 4 cores.
Timings taken while other jobs share the machine are noisy: report the spread too.

    python benchmarks/replay.py [--json] [--scale 0.03125] [--seq-len 128] [--microbatches 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from typing import Any

# benchmarks/profiler.py would shadow the ``profiler`` package (the script's folder is
# sys.path[0], and spawned ranks inherit sys.path): drop that folder.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

MODEL = "qwen3-next-80b-a3b"


def _request(pp: int, m: int, partition: str, seq: int):
    from planner.api import model_section
    from planner.core.hf_config import load_model
    from planner.planning import PlanRequest

    spec = load_model(MODEL)
    return PlanRequest(pp=pp, microbatches=m, schedule="1f1b", partition=partition,
                       model=model_section(spec), cluster={"training": {"seq_len": seq}},
                       parallel={"tp": 1, "ep": 1, "dp": 1})


def _uniform_plan(pp: int, m: int, seq: int):
    """A plan to start from: uniform partition over unit costs (its costs say 'analytical')."""
    from planner.core.costs import CostTable, LayerCost
    from planner.core.hf_config import load_model
    from planner.planning import make_plan

    spec = load_model(MODEL)
    layers = tuple(LayerCost(type=l.type_key, role=l.role, f=1.0, i=1.0, w=1.0) for l in spec.layers)
    table = CostTable(model=MODEL, source="analytical", layers=layers, seq_len=seq, device="unit")
    return make_plan(table, _request(pp, m, "uniform", seq))


def _measured_table(report: dict[str, Any], scale: float, seq: int):
    """The table the first replay measured, with I and W scaled to the full backward B."""
    from planner.core.costs import CostTable, LayerCost, P2PCost
    from planner.core.hf_config import load_model
    from planner.core.layer_math import layer_forward_flops
    from profiler.layers import scaled_model

    c = report["predicted"]["costs"]
    spec = scaled_model(load_model(MODEL), scale)
    layers = []
    for l in spec.layers:
        t = c["layer_types"][l.type_key]
        k = t["b"] / (t["i"] + t["w"]) if t["i"] + t["w"] > 0 else 1.0
        layers.append(LayerCost(type=l.type_key, role=l.role, f=t["f"], i=t["i"] * k, w=t["w"] * k,
                                out_bytes=0 if l.role == "head" else seq * spec.hidden * 4,
                                flops=3.0 * layer_forward_flops(l, spec, seq) * seq))
    return CostTable(model=MODEL, source="measured", layers=tuple(layers), seq_len=seq, device=c["device"],
                     scale=scale, p2p=P2PCost(latency_s=c["p2p_latency_s"], bandwidth=c["p2p_bandwidth"]))


def _replay(plan: Any, opts: Any) -> dict[str, Any]:
    from planner.replay import replay

    t0 = time.perf_counter()
    rep = replay(plan, opts).report
    m, p, e = rep["measured"], rep["predicted"], rep["prediction_error"]
    return {"stages": rep["plan"]["stages"], "prediction": p["source"],
            "predicted_step_s": p["step_time_s"], "measured_step_s": m["step_time_s"],
            "measured_steps_s": m["step_times_s"], "step_error": e["step_time"],
            "predicted_mfu": p["mfu"], "measured_mfu": m["mfu"], "mfu_error": e["mfu"],
            "busy_error_per_rank": e["busy_s"], "measured_bubble_fraction": m["bubble_fraction"],
            "predicted_bubble_fraction": p.get("bubble_fraction"),
            "grad_check_passed": rep["grad_check"].get("passed"),
            "peak_flops_per_rank": m["peak_flops_per_device"], "peak_flops_source": m["peak_flops_source"],
            "wall_s": time.perf_counter() - t0}


def run_case(pp: int, args: argparse.Namespace) -> dict[str, Any]:
    from planner.planning import make_plan
    from planner.replay import ReplayOptions, replay

    opts = ReplayOptions(scale=args.scale, seq_len=args.seq_len, steps=args.steps, warmup=args.warmup,
                         threads=1, timeout_s=120.0, deadline_s=1800.0)
    start = _uniform_plan(pp, args.microbatches, args.seq_len)
    profile = replay(start, replace(opts, steps=1, warmup=0, grad_check=False)).report
    table = _measured_table(profile, args.scale, args.seq_len)
    rows = {}
    for label, partition in (("plan (overlap-aware)", "overlap"), ("serial_balanced", "serial"),
                             ("uniform", "uniform")):
        plan = make_plan(table, _request(pp, args.microbatches, partition, args.seq_len))
        rows[label] = _replay(plan, opts)
    order_pred = sorted(rows, key=lambda k: rows[k]["predicted_step_s"])
    order_meas = sorted(rows, key=lambda k: rows[k]["measured_step_s"])
    return {"pp": pp, "microbatches": args.microbatches, "plans": rows,
            "predicted_order": order_pred, "measured_order": order_meas,
            "ordering_matches": order_pred == order_meas,
            "max_abs_step_error": max(abs(r["step_error"]) for r in rows.values()),
            "profile_layer_types": profile["predicted"]["costs"]["layer_types"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--scale", type=float, default=1 / 32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    cases = [run_case(2, args)]
    if cores >= 4:
        cases.append(run_case(4, args))
    out = {"model": MODEL, "scale": args.scale, "seq_len": args.seq_len, "cpu_cores": cores,
           "backend": "gloo", "threads_per_rank": 1, "cases": cases,
           "skipped": [] if cores >= 4 else [{"pp": 4, "reason": f"4 ranks on {cores} cores is not an honest timing"}],
           "load_average": os.getloadavg()}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for case in cases:
            print(f"pp {case['pp']}, M {case['microbatches']}: ordering matches: {case['ordering_matches']}")
            for name, r in case["plans"].items():
                print(f"  {name:22s} stages {r['stages']}  predicted {r['predicted_step_s'] * 1e3:8.1f} ms"
                      f"  measured {r['measured_step_s'] * 1e3:8.1f} ms  error {r['step_error']:+.1%}"
                      f"  MFU {r['measured_mfu']:.2%} (pred {r['predicted_mfu']:.2%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
