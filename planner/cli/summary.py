"""Human-readable summary tables of a plan."""

from __future__ import annotations

from planner.core.plan import Plan

__all__ = ["plan_summary", "cut_lines", "gib", "LEGEND", "layout_line"]


def gib(nbytes: float | None) -> str:
    """Bytes as GiB text."""
    return "-" if nbytes is None else f"{nbytes / 2**30:.1f}"


def cut_lines(plan: Plan) -> list[str]:
    """The warning that opens the summary when the wall-clock cap cut the search (the plan
    may then differ from run to run: [Note: kept budget] in ``solvers.schedule.search.budget``)."""
    budget = plan.solver.budget or {}
    if not budget.get("bound"):
        return []
    return [f"warning: the --time-limit {budget.get('time_limit_s'):g} s wall-clock cap cut the search in "
            f"{', '.join(budget.get('cut_phases', []))}: this plan may differ from an uncut run on another "
            "machine or load (raise --time-limit, or lower --work for a quicker reproducible plan)", ""]


def _sites_line(sites: dict) -> str:
    """Which dimension crosses the sites' slow link, each crossing's optimizer step, the flip."""
    steps = ", ".join(f"{c} {v:.4f} s" for c, v in sites["steps_s"].items())
    flip = sites["crossover_gbps"]
    return (f"sites {sites['count']} over {sites['inter_site_gbps']:g} Gb/s, {sites['inter_site_latency_ms']:g} ms: "
            f"{sites['crossing']} crosses (optimizer step {steps}; the pipeline schedule no shorter than the link's "
            f"busy time); " + (f"the choice flips at {flip:g} Gb/s" if flip is not None else
                               "no flip in 0.1-10000 Gb/s for these plans"))


def plan_summary(plan: Plan) -> str:
    """Stages, predictions and baselines as aligned text."""
    p, pred = plan.parallel, plan.predicted
    lines = [*cut_lines(plan),
        f"model {plan.model.name}  pp {p.pp} vpp {p.vpp} tp {p.tp} ep {p.ep} "
        f"dp {p.dp}  microbatches {plan.num_microbatches} x {plan.microbatches.size}"
        f"  schedule {plan.solver.schedule or plan.solver.name}  placement {p.placement_style}"
        f"  recompute {plan.cluster.settings.get('recompute', 'none')}",
        "",
        f"{'stage':>5} {'rank':>4} {'layers':>11} {'n':>3}  {'F ms':>7} {'I ms':>7} {'W ms':>7}",
    ]
    sc = plan.stage_costs
    layout = plan.model.layout or ""
    for st in plan.stages:
        a, b = st.layers
        s = st.stage
        lines.append(f"{s:>5} {st.rank:>4} {f'[{a},{b})':>11} {b - a:>3}  {sc['f'][s] * 1e3:7.2f} "
                     f"{sc['i'][s] * 1e3:7.2f} {sc['w'][s] * 1e3:7.2f}  {layout[a:b]}")
    lines += ["", f"{'rank':>4} {'peak GiB':>9} {'limit GiB':>9} {'busy s':>8}"]
    limits, devices = plan.memory_limits, {st.rank: st.device for st in plan.stages if st.device}
    for r, peak in enumerate(pred.peak_memory_bytes):
        busy = (pred.busy_s or [None] * len(pred.peak_memory_bytes))[r]
        limit = limits[r] if isinstance(limits, list) else limits
        lines.append(f"{r:>4} {gib(peak):>9} {gib(limit):>9} "
                     f"{busy if busy is None else f'{busy:8.3f}'}" + (f"  {devices[r]}" if r in devices else ""))
    orders = plan.solver.other.get("device_orders")
    if orders:
        lines += ["", "device order: " + ", ".join(
            f"{o['devices']} {o['step_time_s']:.4g} s" if o["status"] == "planned" else f"{o['devices']} {o['status']}"
            for o in orders) + " (the fastest kept)"]
    lines += ["", f"predicted step {pred.step_time_s:.4f} s   bubble {pred.bubble_fraction:.1%}"
                  f"   MFU {_mfu_text(plan)}"
              + (f"   lower bound {pred.lower_bound_s:.4f} s" if pred.lower_bound_s is not None else "")]
    if pred.optimizer_step_time_s is not None:
        lines.append(f"optimizer step {pred.optimizer_step_time_s:.4f} s = schedule + exposed DP traffic "
                     f"{pred.dp_exposed_s:.4f} s + Adam {pred.optimizer_s:.4f} s")
    if "sites" in plan.extra:
        lines.append(_sites_line(plan.extra["sites"]))
    lines.append("")
    lines.append(f"{'baseline':<16} {'step s':>9} {'vs plan':>8}")
    for name, b in plan.baselines.items():
        t = b.step_time_s
        if t is None:  # no valid schedule for this baseline: say why instead of "None"
            lines.append(f"{name:<16} {'-':>9} {'-':>8}  ({b.status or 'not evaluated'})")
            continue
        ratio = f"{t / pred.step_time_s:.3f}x" if pred.step_time_s else "-"
        note = "" if b.fits_memory is not False else "  (exceeds memory)"
        lines.append(f"{name:<16} {t:9.4f} {ratio:>8}{note}")
    compared = layout_line(plan)
    if compared:
        lines.append(compared)
    sched = plan.solver.schedule_solver or {}
    sched_text = (f", schedule {sched['status']} (gap to lower bound {sched['gap']:.1%})"
                  if sched.get("gap") is not None else "")
    lines.append(f"\nsolver {plan.solver.name}: partition {plan.solver.status}{sched_text}"
                 f" in {plan.solver.wall_s:.2f} s")
    if plan.solver.winner:
        lines.append(f"winner: {plan.solver.winner}")
    from planner.export.targets import runs_on_line

    lines.append(f"target: {runs_on_line(plan)}")
    lines.append(LEGEND)
    return "\n".join(lines)


LEGEND = ("\nlegend: microbatches M x S = M microbatches of S sequences each, per step and data-parallel replica\n"
          "        layers: E embedding, t decoder layer, m MTP module, L loss head (Megatron's layout letters)\n"
          "        F/I/W ms: forward, input-gradient, weight-gradient time of one microbatch on the stage")
"""The lines under every summary that explain its notation."""


def layout_line(plan: Plan) -> str | None:
    """``your layout: X s; ppplan's: Y s (Z x)`` for a plan made with ``--layout`` (None otherwise)."""
    mine, free = plan.baselines.get("user_layout"), plan.baselines.get("ppplan")
    if mine is None:
        return None
    ours = plan.predicted.step_time_s if free is None else free.step_time_s
    theirs = mine.step_time_s
    if theirs is None or ours is None:
        missing = mine if theirs is None else free
        return f"your layout: {_step(theirs)}; ppplan's: {_step(ours)} ({missing.status or 'not planned'})"
    memory = "" if mine.fits_memory is not False else ", and it exceeds memory"
    return (f"your layout: {theirs:.4f} s; ppplan's: {ours:.4f} s ({theirs / ours:.3f}x: yours is "
            f"{'slower' if theirs > ours else 'not slower'}{memory})")


def _step(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.4f} s"


def _mfu_text(plan: Plan) -> str:
    """MFU, or why there is none (a cost table without FLOP counts, e.g. bring-your-own costs)."""
    if not any(plan.stage_costs.get("flops", ())):
        return "n/a (the costs carry no FLOP counts)"
    return f"{plan.predicted.mfu:.1%}"
