"""Replay plans on this machine (gloo, one process per pipeline rank) and compare the
measured step time and MFU with the prediction, on the path a user follows.

1. *profile*: ``ppplan profile qwen3-next-80b-a3b --device cpu --scale S --seq-len T``, the
   measured profiler (``profiler.measured``), at a reduced width of Qwen3-Next-80B-A3B
   (Gated DeltaNet + MoE, full attention + MoE, an MTP layer, embedding, head);
2. *plan*: ``ppplan plan qwen3-next-80b-a3b --profile p.json --pp 2 --microbatches M``
   (the planner's own choice of partition and schedule), the same with ``--partition
   serial`` and ``--partition uniform``, three contrasts (``--schedule 1f1b``; GPipe on the
   uniform partition; ``--schedule zb-h1``, whose backward is split into I and W: the
   profile times each layer's full backward B as well, ``planner.core.costs`` [Note: full
   backward], and where B costs less than I + W the planner's own choice runs full
   backwards);
3. *replay* the judged plans with ``ppplan replay --calibrate``'s path
   (``planner.replay.predict.replay_calibrated``): two calibration plans (1F1B with full and
   with split backwards) replayed in one launch with the judged plans, timed steps
   alternating so that other jobs' load falls on every plan alike;
4. compare each judged plan's measured mean step with its uncalibrated prediction and with
   the prediction calibrated by the calibration plans ([Note: runtime calibration] in
   ``planner.replay.calibrate``).

The measured figure is the *mean* step over the alternating steps ([Note: mean durations]);
pairs are compared step by step (``TIE_RULE``). 4 stages would put 4 processes on 2 cores,
so they run only where the machine has 4 cores. docs/replay.md gives the figures.

    python benchmarks/replay.py [--json] [--scale 0.03125] [--seq-len 128] [--microbatches 4] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

MODEL = "qwen3-next-80b-a3b"


JUDGED = (("plan (user's path)", ()), ("serial_balanced", ("--partition", "serial")),
          ("uniform", ("--partition", "uniform")), ("contrast: 1f1b", ("--schedule", "1f1b")),
          ("contrast: gpipe, uniform", ("--partition", "uniform", "--schedule", "gpipe")),
          ("contrast: zb-h1 (split I, W)", ("--schedule", "zb-h1")))
"""The judged plans: ``ppplan plan`` options added to the user's command."""


def _ppplan(*args: str, cwd: str) -> None:
    """Run the ``ppplan`` CLI as a user would; its own error line on failure."""
    import subprocess

    run = subprocess.run([sys.executable, "-m", "planner.cli", *args, "--quiet"], cwd=cwd,
                         capture_output=True, text=True, timeout=1800)
    if run.returncode:
        raise RuntimeError(f"ppplan {' '.join(args)} failed: {run.stderr.strip()}")


def _user_path(pp: int, args: argparse.Namespace, work: str) -> tuple[Any, dict[str, Any]]:
    """``ppplan profile`` then ``ppplan plan`` per judged variant: (table, plans)."""
    from planner.core.costs_io import load_costs
    from planner.core.plan import load_plan_file

    _ppplan("profile", MODEL, "--device", "cpu", "--scale", str(args.scale), "--seq-len", str(args.seq_len),
            "--threads", "1", "--repeats", str(args.profile_repeats), "--out", "p.json", cwd=work)
    common = ("plan", MODEL, "--profile", "p.json", "--pp", str(pp), "--microbatches", str(args.microbatches),
              "--seq-len", str(args.seq_len))
    plans = {}
    for j, (label, extra) in enumerate(JUDGED):
        _ppplan(*common, *extra, "--out", f"plan{j}.json", cwd=work)
        plans[label] = load_plan_file(os.path.join(work, f"plan{j}.json"))
    return load_costs(os.path.join(work, "p.json")), plans


_median = statistics.median


def _row(plan: Any, rep: dict[str, Any]) -> dict[str, Any]:
    """One judged plan: measured mean (and median) step, and the error of its prediction
    calibrated (``ppplan replay --calibrate``'s figures) and uncalibrated."""
    m, c = rep["measured"], rep["calibrated"]
    steps = m["step_times_s"]
    measured = c["measured_mean_step_s"]  # see the module docstring: the calibration predicts means
    preds = {"uncalibrated": rep["predicted"]["step_time_s"], "calibrated": c["step_time_s"]}
    q = statistics.quantiles(steps, n=4)
    slowest = max(rep["decomposition"], key=lambda d: d["measured"]["step_s"])
    return {"stages": [list(b) for b in plan.bounds()], "predicted_step_s": c["step_time_s"],
            "measured_step_s": measured, "step_error": c["step_time_error"],
            "predicted_step_s_by_calibration": preds,
            "step_error_by_calibration": {k: (measured - v) / v for k, v in preds.items()},
            "measured_median_step_s": m["step_time_s"], "median_step_error": c["median_step_time_error"],
            "measured_steps_s": steps, "relative_iqr": (q[2] - q[0]) / measured,
            "error_terms_vs_uncalibrated_s (slowest rank, median step)": slowest["difference_s"],
            "predicted_mfu_uncalibrated": rep["predicted"]["mfu"], "measured_mfu": m["mfu"],
            "peak_flops_source": m["peak_flops_source"], "grad_check_passed": rep["grad_check"].get("passed")}


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


def run_case(pp: int, args: argparse.Namespace) -> dict[str, Any]:
    """The user's path (profile, plan), then one launch replaying the calibration plans and
    the judged plans with their timed steps alternating (``ppplan replay --calibrate``)."""
    import tempfile

    from planner.replay import ReplayOptions
    from planner.replay.predict import replay_calibrated

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ppplan-replay-bench-") as work:
        table, plans = _user_path(pp, args, work)
        opts = ReplayOptions(scale=args.scale, seq_len=args.seq_len, steps=args.steps, warmup=args.warmup,
                             threads=1, timeout_s=120.0, deadline_s=3600.0, profile=os.path.join(work, "p.json"))
        t1 = time.perf_counter()
        reports = [r.report for r in replay_calibrated(list(plans.values()), opts)]
    rows = {k: _row(plans[k], rep) for k, rep in zip(plans, reports)}
    cal = reports[0]["calibrated"]
    return {"pp": pp, "microbatches": args.microbatches, "timed_steps_per_plan": args.steps,
            "plans": rows, "ordering": _ordering(rows),
            "max_abs_step_error": {"uncalibrated": max(abs(r["step_error_by_calibration"]["uncalibrated"])
                                                       for r in rows.values()),
                                   "calibrated": max(abs(r["step_error"]) for r in rows.values())},
            "calibration": {"interleaved": cal["calibration"],
                            "calibration plans (in-sample check, on the first judged plan's partition)":
                                cal["calibration_plans_in_sample"]},
            "profile": {"command": f"ppplan profile {MODEL} --device cpu --scale {args.scale} --seq-len "
                                   f"{args.seq_len} --threads 1 --repeats {args.profile_repeats}",
                        "layer_types": _type_costs(table), "threads": table.meta["profiler"].get("threads"),
                        "wall_s": table.meta.get("wall_s")},
            "wall_s": {"profile_and_plan": t1 - t0, "interleaved_replay": time.perf_counter() - t1},
            "load_average_after": os.getloadavg()}


def _type_costs(table: Any) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for lc in table.layers:
        out.setdefault(lc.type, {"f": lc.f, "i": lc.i, "w": lc.w, "b": lc.b})
    return out


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
                         f"IQR {r['relative_iqr']:.0%})  error calibrated {r['step_error']:+.1%}, "
                         f"uncalibrated {e['uncalibrated']:+.1%}")
        k = next(k for k in case["calibration"] if k.startswith("calibration plans"))
        for c in case["calibration"][k]:
            lines.append(f"  {'(calibration plan, ' + c['schedule'] + ', in-sample)':50s} predicted "
                         f"{c['step_time_s'] * 1e3:7.1f} ms  measured mean {c['measured_mean_step_s'] * 1e3:7.1f} ms  "
                         f"error {c['step_time_error']:+.1%}")
        lines.append(f"  predicted {o['predicted_order']}")
        lines.append(f"  measured  {o['measured_order']}")
        for p in o["pairs"]:
            lines.append(f"    {p['pair'][0]} vs {p['pair'][1]}: predicted {p['predicted_gap']:+.2%}, "
                         f"measured {p['measured_gap']:+.2%} +- {p['resolution']:.2%}")
        lines.append(f"  every resolved pair ordered correctly: {o['every_resolved_pair_ordered_correctly']} "
                     f"({o['resolved_pairs']} resolved); tie rule: {o['tie_rule']}")
        m = case["max_abs_step_error"]
        lines.append(f"  largest |step error| over the judged plans: uncalibrated {m['uncalibrated']:.1%}, "
                     f"calibrated {m['calibrated']:.1%}")
    lines.append(f"{out['note']}; load average before {out['load_average_before']}, after {out['load_average']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--scale", type=float, default=1 / 32)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per plan (alternating)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--profile-repeats", type=int, default=5, help="ppplan profile --repeats")
    args = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    cases = [run_case(2, args)]
    if cores >= 4:
        cases.append(run_case(4, args))
    out = {"model": MODEL, "scale": args.scale, "seq_len": args.seq_len, "cpu_cores": cores,
           "backend": "gloo", "threads_per_rank": 1, "cases": cases,
           "skipped": [] if cores >= 4 else [{"pp": 4, "reason": f"4 ranks on {cores} cores is not an honest timing"}],
           "load_average_before": load_before, "load_average": os.getloadavg(),
           "note": f"measured on this {cores}-core CPU machine, possibly shared with other jobs (see the load average)"}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(text(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
