"""Rank 0's last job: the reference run, the prediction, the metrics, the trace."""

from __future__ import annotations

from typing import Any

import torch

from planner.core.plan import Plan
from planner.replay.calibrate import measure_calibration
from planner.replay.decompose import decompose
from planner.replay.gradcheck import compare_grads, reference_step
from planner.replay.measure import action_timeline, relative_error, summarize
from planner.replay.options import ReplayOptions, ReplayResult
from planner.replay.peak import replay_peak
from planner.replay.predict import simulate_plan_as_run, simulate_on_table
from planner.replay.trace import chrome_trace
from profiler.layers.moe_capacity import describe

__all__ = ["ENGINE", "assemble", "text_summary"]

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
    re-prediction's table: ``planner.replay.link`` [Note: link share])."""
    if opts.link == "emulated":
        from planner.replay.link import LINK_LABEL, gpu_share

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
                 "schedule": plan.solver.get("schedule"), "costs": plan.costs},
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
