"""Rank 0's last job: the single-process reference and gradient check, the prediction, the
metrics and the Chrome / Perfetto trace of the measured timeline beside the predicted one.
"""

from __future__ import annotations

from typing import Any

import torch

from planner.core.plan import Plan
from planner.core.schedule import OVERLAP
from planner.core.simulate import SimResult
from planner.replay.calibrate import measure_calibration
from planner.replay.device import replay_peak
from planner.replay.lowering import ReplayModel, build_stage, loss_fn, make_batch
from planner.replay.measure import action_timeline, decompose, relative_error, summarize
from planner.replay.options import ReplayOptions, ReplayResult
from planner.replay.predict import simulate_on_table, simulate_plan_as_run
from profiler.layers.moe_capacity import describe

__all__ = ["ENGINE", "assemble", "text_summary", "chrome_trace", "reference_step", "compare_grads", "RTOL", "ATOL"]


# ---- report -------------------------------------------------------------------------------------
# Rank 0's last job: the reference run, the prediction, the metrics, the trace.


ENGINE = ("torch.distributed.pipelining._PipelineScheduleRuntime: the plan's compute-only "
          "actions, lowered by torch (_add_send_recv); OVERLAP_F_B pairs run by planner.runtime, "
          "forward and backward concurrent, taking turns at every MoE all-to-all")


def _grad_check(gathered: list[dict[str, Any]], rm: Any, device: torch.device) -> dict[str, Any]:
    grads: dict[str, torch.Tensor] = {}
    losses: list[float] = []
    for r in gathered:
        grads.update(r["grads"])
        losses = losses or r["losses"]
    ref_losses, ref_grads = reference_step(rm, device)
    # experts on other ranks see their rows grouped differently: the losses may round differently
    return compare_grads(grads, losses, ref_grads, ref_losses, loss_rtol=1e-5 if rm.ep > 1 else 0.0)


def _link(plan: Plan, opts: ReplayOptions, ep: int, table: Any) -> dict[str, Any]:
    """The expert-parallel link the figures were made with (emulated ones say so, with the
    share of the MoE layers' time asked of the link and the one realised in the
    re-prediction's table: ``planner.replay.costs`` [Note: link share])."""
    if opts.link == "emulated":
        from planner.replay.costs import LINK_LABEL, gpu_share

        link = table.meta["link"]
        if opts.link_scale is not None:
            asked, share = "--link-scale", None
        elif opts.link_share is not None:
            asked, share = "--link-share", opts.link_share
        else:
            asked, share = "the analytical model's share on the plan's cluster", gpu_share(plan)
        return {"ep": 1, "link": "emulated", "link_scale": link["link_scale"], "emulated": True, "label": LINK_LABEL,
                "share_of_moe_time_asked": share, "share_set_by": asked,
                "share_of_moe_time_in_prediction": link["share_of_moe_time"]}
    return {"ep": ep, "link": "real", "emulated": False,
            "label": f"real all-to-alls over {ep} expert-parallel ranks per stage" if ep > 1
            else "no expert parallelism (every expert local, no all-to-all)"}


def assemble(plan: Plan, opts: ReplayOptions, out: dict[str, Any]) -> ReplayResult:
    """The report and trace from what ``worker.run_rank`` returned on rank 0."""
    rm, gathered = out["rm"], out["ranks"]
    if out["table"] is None:
        predicted, sim = simulate_plan_as_run(plan)
    else:
        predicted, sim = simulate_on_table(plan, out["table"])
    peak = replay_peak(out["torch_device"], opts.profile)
    measured, errors, rep = summarize(plan, rm, gathered, predicted, peak_flops=peak.flops_per_s, peak_label=peak.label)
    if predicted.get("recorded_matches") is False:
        errors["step_time_vs_recorded"] = relative_error(measured["step_time_s"], predicted["recorded_step_time_s"])
    timelines = [action_timeline(plan, r["rank"], r["steps"][rep]["spans"]) for r in gathered]
    steps = [r["steps"][rep] for r in gathered]
    parts = decompose(sim, timelines, [s.get("base_s") for s in steps], [s["step_s"] for s in steps])
    report = {
        "plan": {"model": plan.model.get("name"), "pp": plan.pp, "vpp": plan.parallel.get("vpp", 1),
                 "stages": [list(b) for b in plan.bounds()], "microbatches": plan.num_microbatches,
                 "schedule": plan.solver.schedule, "costs": plan.costs},
        "replay": {"scale": rm.scale, "seq_len": rm.seq_len, "microbatch_size": rm.microbatch_size,
                   "hidden": rm.spec.hidden, "device": out["device"], "backend": out["backend"],
                   "world_size": len(gathered), "threads_per_rank": gathered[0]["threads"],
                   "cpu_binding": [g.get("binding") for g in gathered],
                   "steps": opts.steps, "warmup": opts.warmup, "seed": opts.seed, "engine": ENGINE,
                   "plan_ep": plan.parallel.get("ep", 1),
                   "expert_parallel": _link(plan, opts, out.get("ep", 1), out["table"]),
                   "processes": len(gathered) * out.get("ep", 1), "moe_dispatch": describe(rm.moe_capacity),
                   "modules": rm.modules},
        "measured": measured,
        "predicted": predicted,
        "prediction_error": errors,
        "decomposition": parts,
        "calibration": measure_calibration(plan, sim, gathered, source=f"this replay, {opts.steps} timed steps, "
                                           f"against its prediction ({predicted['source']})").to_dict(),
        "grad_check": _grad_check(gathered, rm, out["torch_device"]) if opts.grad_check else {"passed": None, "skipped": True},
    }
    trace = chrome_trace(timelines, sim, predicted_label=predicted["source"])
    return ReplayResult(report=report, trace=trace, table=out["table"])


def text_summary(report: dict[str, Any]) -> str:
    """A few lines for the terminal: measured vs predicted, per rank, gradient check."""
    m, p, e, g = (report[k] for k in ("measured", "predicted", "prediction_error", "grad_check"))
    rp = report["replay"]

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x:+.1%}"

    emulated = rp.get("expert_parallel", {}).get("emulated")
    lines = [("EMULATED LINK: every figure below was measured with emulated all-to-alls\n" if emulated else "")
             + f"replayed {report['plan']['model']} at scale {rp['scale']:g} (hidden {rp['hidden']}, "
             f"seq {rp['seq_len']}) on {rp['world_size']} x {rp['device']} ({rp['backend']})",
             f"expert parallel: {rp['expert_parallel']['label']} (plan EP {rp['plan_ep']})"
             if "expert_parallel" in rp else "expert parallel: n/a", *_link_lines(rp.get("expert_parallel", {})),
             f"prediction: {p['source']}",
             f"step time  measured {m['step_time_s'] * 1e3:9.2f} ms   predicted "
             f"{p['step_time_s'] * 1e3:9.2f} ms   error {pct(e['step_time'])}",
             *_recorded_lines(p, e), *_calibrated_lines(report.get("calibrated")),
             f"MFU        measured {_mfu(m['mfu'])}      predicted {_mfu(p['mfu'])}      "
             f"(peak: {m['peak_flops_source']})"]
    for r, busy in enumerate(m["busy_s"]):
        lines.append(f"rank {r}: busy {busy * 1e3:8.2f} ms (error {pct(e['busy_s'][r])}), bubble "
                     f"{m['bubble_s'][r] * 1e3:8.2f} ms, peak memory {m['peak_memory_bytes'][r] / 2**20:.0f} MiB")
    slow = max(report.get("decomposition") or [], key=lambda d: d["measured"]["step_s"], default=None)
    if slow is not None:
        d = slow["difference_s"]
        lines.append(f"step error on rank {slow['rank']} (ms): busy {d['busy'] * 1e3:+.1f}, gaps "
                     f"{d['gaps'] * 1e3:+.1f}, start {d['first_start'] * 1e3:+.1f}, end {d['tail'] * 1e3:+.1f}")
    if g.get("passed") is None:
        lines.append("gradient check: skipped")
    else:
        lines.append(f"gradient check: {'passed' if g['passed'] else 'FAILED'} (max |diff| "
                     f"{g['max_abs_diff']:.3g} over {g['parameters']} tensors, loss |diff| "
                     f"{g['loss_max_abs_diff']:.3g})")
    return "\n".join(lines)


def _mfu(x: float | None) -> str:
    return f"{'n/a':>9s}" if x is None else f"{x:9.2%}"


def _link_lines(link: dict[str, Any]) -> list[str]:
    if not link.get("emulated"):
        return []
    asked = link["share_of_moe_time_asked"]
    return [f"emulated link: scale {link['link_scale']:.4g}, set by {link['share_set_by']}"
            + ("" if asked is None else f" ({asked:.1%} of the MoE layers' time)")
            + f"; in the re-prediction's table the exchanges are {link['share_of_moe_time_in_prediction']:.1%} of it"]


def _recorded_lines(p: dict[str, Any], e: dict[str, Any]) -> list[str]:
    """The plan's recorded prediction, when the simulation of the order that ran differs."""
    if p.get("recorded_matches") is not False:
        return []
    sim = p["ppplan_simulate_step_time_s"]
    return [f"the plan's recorded prediction {p['recorded_step_time_s'] * 1e3:.2f} ms is not the simulation of the "
            f"order that ran ({sim * 1e3:.2f} ms by ppplan simulate, {p['step_time_s'] * 1e3:.2f} ms as torch runs "
            f"it): judged against the simulation (against the recorded figure: error "
            f"{'n/a' if e.get('step_time_vs_recorded') is None else format(e['step_time_vs_recorded'], '+.1%')})"]


def _calibrated_lines(c: dict[str, Any] | None) -> list[str]:
    if not c:
        return []
    return [f"calibrated predicted {c['step_time_s'] * 1e3:9.2f} ms   measured mean {c['measured_mean_step_s'] * 1e3:9.2f} ms"
            f"   error {c['step_time_error']:+.1%} (calibrated by two calibration plans replayed alongside)"]


# ---- trace --------------------------------------------------------------------------------------
# Chrome / Perfetto trace of a replay: the measured timeline beside the predicted one.
#
# Two process rows, ``measured`` (pid 0) and ``predicted`` (pid 1), one thread row per
# pipeline rank; each action is a complete event (``ph: X``, microseconds) named by its
# text form (``2F0``, ``(0F3;1I1)OVERLAP_F_B``). Open in chrome://tracing or
# ui.perfetto.dev. Format: the Trace Event Format (Google, "Trace Event Format" doc).


_US = 1e6


def _meta(pid: int, name: str, ranks: int) -> list[dict[str, Any]]:
    out = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}},
           {"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": pid}}]
    out += [{"ph": "M", "pid": pid, "tid": r, "name": "thread_name", "args": {"name": f"rank {r}"}}
            for r in range(ranks)]
    return out


def _event(pid: int, rank: int, name: str, start: float, end: float, **args: Any) -> dict[str, Any]:
    kind = OVERLAP if name.endswith(OVERLAP) else name.rstrip("0123456789")[-1]
    return {"ph": "X", "pid": pid, "tid": rank, "name": name, "cat": kind,
            "ts": start * _US, "dur": max(end - start, 0.0) * _US, "args": args}


def chrome_trace(measured: list[list[dict[str, Any]]], sim: SimResult, *,
                 predicted_label: str) -> dict[str, Any]:
    """Trace JSON from per-rank measured actions (``measure.action_timeline``) and a simulation."""
    ranks = len(measured)
    events = _meta(0, "measured", ranks) + _meta(1, f"predicted ({predicted_label})", ranks)
    for rank, actions in enumerate(measured):
        for a in actions:
            events.append(_event(0, rank, a["action"], a["start"], a["end"], busy_s=a["busy"]))
    for n, action in enumerate(sim.actions):
        events.append(_event(1, sim.rank_of[n], str(action), sim.start[n], sim.end[n]))
    return {"traceEvents": events, "displayTimeUnit": "ms"}


# ---- gradient check -----------------------------------------------------------------------------
# Correctness of a replayed step: its gradients and losses against one process.
#
# The reference builds the whole model from the same seed on one process, runs the
# same microbatches (the same slices torch's runtime cuts: dim 0, in order), sums
# each microbatch's gradient and divides by the microbatch count at the end, as
# ``_PipelineScheduleRuntime`` does with ``scale_grads=True`` (REDUCE_GRAD). Each
# microbatch's forward is the same arithmetic in both runs, so the losses should be
# bitwise equal; gradients may differ by summation order, hence a tolerance.


RTOL = 1e-4
"""Relative tolerance per gradient element (FP32 summation order)."""
ATOL = 1e-6
"""Absolute tolerance per gradient element."""


def reference_step(rm: ReplayModel, device: torch.device) -> tuple[list[float], dict[str, torch.Tensor]]:
    """(loss per microbatch, gradient per parameter name) of one step on one process."""
    model = build_stage(rm, 0, rm.spec.num_layers, device)
    m = rm.microbatches
    losses = []
    for e in range(rm.ep):  # expert parallel: each EP rank's batch, gradients averaged over them
        ids, target = make_batch(rm, device, ep_rank=e)
        for x, y in zip(ids.tensor_split(m), target.tensor_split(m)):
            loss = loss_fn(model(x), y)
            loss.backward()
            losses.append(float(loss.detach()))
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            grads[name] = (p.grad / (m * rm.ep)).cpu()
    return losses, grads


def compare_grads(grads: dict[str, torch.Tensor], losses: list[float],
                  ref_grads: dict[str, torch.Tensor], ref_losses: list[float], *,
                  loss_rtol: float = 0.0) -> dict[str, Any]:
    """``passed``, ``max_abs_diff`` (gradients), ``loss_max_abs_diff`` and what failed.
    ``loss_rtol`` > 0 when the experts ran on other ranks: the padded capacity mode runs
    every source rank's rows in one batched GEMM, which may round differently; dropless
    experts give each source rank's rows a GEMM of their own ([Note: one GEMM per source
    rank] in ``profiler.layers.moe``), so their losses are bitwise equal, as they must be
    with every expert local."""
    missing = sorted(set(ref_grads) ^ set(grads))
    max_abs = 0.0
    worst = ""
    bad = []
    for name in sorted(set(ref_grads) & set(grads)):
        diff = (grads[name] - ref_grads[name]).abs()
        d = float(diff.max()) if diff.numel() else 0.0
        if d > max_abs:
            max_abs, worst = d, name
        if not torch.allclose(grads[name], ref_grads[name], rtol=RTOL, atol=ATOL):
            bad.append(name)
    loss_diff = max((abs(a - b) for a, b in zip(losses, ref_losses)), default=float("inf"))
    same_count = len(losses) == len(ref_losses)
    return {
        "passed": not missing and not bad and same_count
        and loss_diff <= loss_rtol * max((abs(x) for x in ref_losses), default=0.0),
        "max_abs_diff": max_abs,
        "worst_parameter": worst,
        "loss_max_abs_diff": loss_diff,
        "losses": losses,
        "reference_losses": ref_losses,
        "parameters": len(ref_grads),
        "mismatched": bad[:8],
        "missing": missing[:8],
        "rtol": RTOL,
        "atol": ATOL,
    }
