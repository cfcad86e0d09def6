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
   partition, and the same request with ``partition=serial`` and ``uniform``; two
   contrasts (``JUDGED``): the first stage pinned to 16 decoder layers, and GPipe on
   the uniform partition; plus a *calibration plan* (the uniform 1F1B plan again);
3. *replay* the calibration plan and the judged plans in one launch, their
   timed steps alternating (CAL A B C, CAL A B C, ...: ``replay_interleaved``), so
   that load from other jobs falls on every plan alike;
4. *predict* each judged plan with the calibration the calibration plan measured
   (``planner.replay.calibrate``: alone durations relative to the table, slowdown
   while the ranks share the cores, runtime work between actions, message latency,
   step overhead; [Note: runtime calibration]) and compare. The prediction made in
   advance, from the profiling replay's own calibration, and the uncalibrated one are
   reported beside it.

The measured figure is the *mean* step over the alternating steps (the median too):
with other jobs starting and stopping on a shared machine the step time is bimodal
and its median jumps between the modes, and the calibration predicts means
([Note: mean durations]). Ordering: pairs are compared step by step (``TIE_RULE``).

On this CPU nothing overlaps (torch runs ``OVERLAP_F_B`` halves one after the other,
and with every expert local there is no all-to-all), so the measured table has no pair
costs and the overlap-aware partition can only coincide with or tie ``serial_balanced``;
``uniform`` is the baseline that differs. 4 stages would put 4 processes on 2 cores,
which is not an honest timing, so they run only where the machine has 4 cores.

    python benchmarks/replay.py [--json] [--scale 0.03125] [--seq-len 128] [--microbatches 4] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

# benchmarks/profiler.py would shadow the ``profiler`` package (the script's folder is
# sys.path[0], and spawned ranks inherit sys.path): drop that folder.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

MODEL = "qwen3-next-80b-a3b"


def _request(pp: int, m: int, partition: str, seq: int, *, schedule: str = "1f1b", first: int | None = None):
    from planner.api import model_section
    from planner.core.hf_config import load_model
    from planner.planning import PlanRequest
    from solvers.partition.pins import StagePins

    spec = load_model(MODEL)
    return PlanRequest(pp=pp, microbatches=m, schedule=schedule, partition=partition,
                       model=model_section(spec), cluster={"training": {"seq_len": seq}},
                       parallel={"tp": 1, "ep": 1, "dp": 1}, pins=StagePins(first=first))


JUDGED = (("plan (overlap-aware)", "overlap", {}), ("serial_balanced", "serial", {}), ("uniform", "uniform", {}),
          ("contrast: first stage pinned to 16 decoder layers", "serial", {"first": 16}),
          ("contrast: gpipe, uniform", "uniform", {"schedule": "gpipe"}))
"""The judged plans: the issue's three, and two contrasts the calibration plan is not like
(another partition; another schedule, whose ranks share the cores in another pattern),
which also give the ordering check pairs whose predicted gaps exceed the resolution."""


def _uniform_plan(pp: int, m: int, seq: int):
    """A plan to start from: uniform partition over unit costs (its costs say 'analytical')."""
    from planner.core.costs import CostTable, LayerCost
    from planner.core.hf_config import load_model
    from planner.planning import make_plan

    spec = load_model(MODEL)
    layers = tuple(LayerCost(type=l.type_key, role=l.role, f=1.0, i=1.0, w=1.0) for l in spec.layers)
    table = CostTable(model=MODEL, source="analytical", layers=layers, seq_len=seq, device="unit")
    return make_plan(table, _request(pp, m, "uniform", seq))


def _measured_table(report: dict[str, Any], scale: float, seq: int, cal: Any):
    """The table the first replay measured, with I and W scaled to the full backward B, and
    the P2P latency the runtime experienced (the calibration's)."""
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
    latency = c["p2p_latency_s"] if cal.p2p_latency_s is None else cal.p2p_latency_s
    return CostTable(model=MODEL, source="measured", layers=tuple(layers), seq_len=seq, device=c["device"],
                     scale=scale, p2p=P2PCost(latency_s=latency, bandwidth=c["p2p_bandwidth"]),
                     meta={"calibration": cal.to_dict()})


_median = statistics.median


def _row(plan: Any, rep: dict[str, Any], cals: dict[str, Any]) -> dict[str, Any]:
    """One judged plan: measured mean (and median) step, and the error of its prediction under
    each calibration (``cals``: name -> Calibration) and uncalibrated."""
    from planner.replay.calibrate import calibrated_plan

    m = rep["measured"]
    steps = m["step_times_s"]
    measured = statistics.fmean(steps)  # see the module docstring: the calibration predicts means
    preds = {"uncalibrated": plan.predicted["step_time_s"],
             **{k: calibrated_plan(plan, c).predicted["step_time_s"] for k, c in cals.items()}}
    q = statistics.quantiles(steps, n=4)
    slowest = max(rep["decomposition"], key=lambda d: d["measured"]["step_s"])
    return {"stages": [list(b) for b in plan.bounds()], "predicted_step_s": preds["interleaved"],
            "measured_step_s": measured, "step_error": (measured - preds["interleaved"]) / preds["interleaved"],
            "predicted_step_s_by_calibration": preds,
            "step_error_by_calibration": {k: (measured - v) / v for k, v in preds.items()},
            "measured_median_step_s": m["step_time_s"],
            "median_step_error": (m["step_time_s"] - preds["interleaved"]) / preds["interleaved"],
            "measured_steps_s": steps, "relative_iqr": (q[2] - q[0]) / measured,
            "error_terms_vs_uncalibrated_s (slowest rank, median step)": slowest["difference_s"],
            "predicted_mfu_uncalibrated": rep["predicted"]["mfu"], "measured_mfu": m["mfu"],
            "grad_check_passed": rep["grad_check"].get("passed")}


TIE_RULE = ("pairs are compared step by step (the plans' timed steps alternate): r = median over "
            "steps of (step_a - step_b) / step_b, resolution = 2 x 1.4826 x MAD(r) / sqrt(steps) "
            "(about a 95% interval); a pair whose predicted gap is below the resolution is a "
            "predicted tie and is not judged; measured plans tie when |r| is below the resolution")


def _ordering(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Predicted vs measured ordering under ``TIE_RULE``."""
    names = list(rows)
    pairs = []
    for j, a in enumerate(names):
        for b in names[j + 1:]:
            pa, pb = rows[a]["predicted_step_s"], rows[b]["predicted_step_s"]
            r = [(x - y) / y for x, y in zip(rows[a]["measured_steps_s"], rows[b]["measured_steps_s"])]
            med = _median(r)
            res = 2 * 1.4826 * _median([abs(x - med) for x in r]) / len(r) ** 0.5
            gap = (pa - pb) / pb
            resolved = abs(gap) > res
            pairs.append({"pair": [a, b], "predicted_gap": gap, "measured_gap": med, "resolution": res,
                          "predicted_tie": not resolved, "measured_tie": abs(med) <= res,
                          "ordered_correctly": (gap > 0) == (med > 0) if resolved else None})
    return {"tie_rule": TIE_RULE, "pairs": pairs,
            "predicted_order": _order(names, rows, "predicted_step_s", pairs, "predicted_tie"),
            "measured_order": _order(names, rows, "measured_step_s", pairs, "measured_tie"),
            "resolved_pairs": sum(not p["predicted_tie"] for p in pairs),
            "every_resolved_pair_ordered_correctly": all(p["ordered_correctly"] for p in pairs
                                                         if not p["predicted_tie"])}


def _order(names: list[str], rows: dict[str, Any], key: str, pairs: list[dict[str, Any]], tie: str) -> str:
    tied = {frozenset(p["pair"]) for p in pairs if p[tie]}
    ranked = sorted(names, key=lambda k: rows[k][key])
    out = ranked[0]
    for x, y in zip(ranked, ranked[1:]):
        out += (" = " if frozenset((x, y)) in tied else " < ") + y
    return out


def replay_reports(plans: list[Any], opts: Any) -> list[dict[str, Any]]:
    from planner.replay import replay_interleaved

    return [r.report for r in replay_interleaved(plans, opts)]


def run_case(pp: int, args: argparse.Namespace) -> dict[str, Any]:
    """Profile (table + first calibration), plan, then one launch replaying the calibration
    plan and the judged plans with their timed steps alternating."""
    from planner.planning import make_plan
    from planner.replay import ReplayOptions
    from planner.replay.calibrate import Calibration

    opts = ReplayOptions(scale=args.scale, seq_len=args.seq_len, steps=args.steps, warmup=args.warmup,
                         threads=1, timeout_s=120.0, deadline_s=1800.0)
    t0 = time.perf_counter()
    start = _uniform_plan(pp, args.microbatches, args.seq_len)
    profile = replay_reports([start], replace(opts, steps=args.profile_steps, grad_check=False))[0]
    first = Calibration.from_dict(profile["calibration"])
    table = _measured_table(profile, args.scale, args.seq_len, first)
    plans = {label: make_plan(table, _request(pp, args.microbatches, partition, args.seq_len, **kw))
             for label, partition, kw in JUDGED}
    calibrator = make_plan(table, _request(pp, args.microbatches, "uniform", args.seq_len))
    t1 = time.perf_counter()
    reports = replay_reports([calibrator, *plans.values()], opts)
    paired = Calibration.from_dict({**reports[0]["calibration"],
                                    "source": "calibration plan, its steps alternating with the judged plans'"})
    cals = {"profile only": first, "interleaved": paired}
    rows = {k: _row(plans[k], rep, cals) for k, rep in zip(plans, reports[1:])}
    return {"pp": pp, "microbatches": args.microbatches, "timed_steps_per_plan": args.steps,
            "plans": rows, "ordering": _ordering(rows),
            "max_abs_step_error": max(abs(r["step_error"]) for r in rows.values()),
            "calibration": {"interleaved": paired.to_dict(), "profile only": first.to_dict(),
                            "calibration plan (in-sample check; same partition and schedule as 'uniform')":
                                _row(calibrator, reports[0], cals)},
            "profile": {"uncalibrated_error": profile["prediction_error"]["step_time"],
                        "measured_step_s": profile["measured"]["step_time_s"],
                        "decomposition": profile["decomposition"],
                        "layer_types": profile["predicted"]["costs"]["layer_types"],
                        "ping_pong_p2p_latency_s": profile["predicted"]["costs"]["p2p_latency_s"]},
            "wall_s": {"profile_and_plan": t1 - t0, "interleaved_replay": time.perf_counter() - t1},
            "load_average_after": os.getloadavg()}


def _rounded(d: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in d.items()}


def text(out: dict[str, Any]) -> str:
    """The benchmark's figures as lines for the terminal."""
    lines: list[str] = []
    for case in out["cases"]:
        o, cal = case["ordering"], case["calibration"]["interleaved"]
        lines.append(f"pp {case['pp']}, M {case['microbatches']}, {case['timed_steps_per_plan']} alternating "
                     f"timed steps per plan; calibration: alone x{_rounded(cal['alone_scale'])}, slowdown "
                     f"{_rounded(cal['slowdown'])}, {cal['between_actions_s'] * 1e3:.2f} ms between actions")
        for name, r in case["plans"].items():
            e = r["step_error_by_calibration"]
            lines.append(f"  {name:50s} {r['stages']}  predicted {r['predicted_step_s'] * 1e3:7.1f} ms  measured "
                         f"mean {r['measured_step_s'] * 1e3:7.1f} ms (median {r['measured_median_step_s'] * 1e3:.1f}, "
                         f"IQR {r['relative_iqr']:.0%})  error {r['step_error']:+.1%} (in advance "
                         f"{e['profile only']:+.1%}, uncalibrated {e['uncalibrated']:+.1%})")
        k = next(k for k in case["calibration"] if k.startswith("calibration plan"))
        c = case["calibration"][k]
        lines.append(f"  {'(' + k + ')':50s} {c['stages']}  predicted {c['predicted_step_s'] * 1e3:7.1f} ms  "
                     f"measured mean {c['measured_step_s'] * 1e3:7.1f} ms  error {c['step_error']:+.1%}")
        lines.append(f"  predicted {o['predicted_order']}")
        lines.append(f"  measured  {o['measured_order']}")
        for p in o["pairs"]:
            lines.append(f"    {p['pair'][0]} vs {p['pair'][1]}: predicted {p['predicted_gap']:+.2%}, "
                         f"measured {p['measured_gap']:+.2%} +- {p['resolution']:.2%}")
        lines.append(f"  every resolved pair ordered correctly: {o['every_resolved_pair_ordered_correctly']} "
                     f"({o['resolved_pairs']} resolved); tie rule: {o['tie_rule']}")
    lines.append(f"load average before {out['load_average_before']}, after {out['load_average']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--scale", type=float, default=1 / 32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per plan (alternating)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--profile-steps", type=int, default=8, help="timed steps of the profiling replay")
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    cases = [run_case(2, args)]
    if cores >= 4:
        cases.append(run_case(4, args))
    out = {"model": MODEL, "scale": args.scale, "seq_len": args.seq_len, "cpu_cores": cores,
           "backend": "gloo", "threads_per_rank": 1, "cases": cases,
           "skipped": [] if cores >= 4 else [{"pp": 4, "reason": f"4 ranks on {cores} cores is not an honest timing"}],
           "load_average_before": load_before, "load_average": os.getloadavg()}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(text(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
