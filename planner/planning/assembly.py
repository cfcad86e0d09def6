"""Turn the planner's chosen evaluation into a ``Plan``: predictions, baselines, solver record."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.core.plan import (Baseline, Microbatches, ModelInfo, Parallel, Plan, Predicted, SolverRecord,
                               partition_stages, stage_costs_to_dict)
from planner.core.schedule import format_schedule
from planner.planning.records import limit_bytes_of, memory_limit_of
from solvers.schedule.search.lower_bound import bound_parts

if TYPE_CHECKING:
    from planner.core.costs import CostTable
    from planner.planning.records import Evaluation, Trial

__all__ = ["baselines_section", "to_plan", "bound_record"]


def bound_record(costs, microbatches: int, activation_limit: list[int | None] | None) -> dict:
    """``predicted`` fields of the step-time lower bound: its value with the memory-limited
    term for ``activation_limit`` (activation bytes per rank; None = no limit), each term by name
    and the one that binds (``solvers.schedule.search.lower_bound``)."""
    parts = bound_parts(costs, microbatches, activation_limit=activation_limit)
    binds = max(parts, key=lambda k: (parts[k], k == "memory"))
    return {"lower_bound_s": parts[binds], "lower_bound_terms": dict(parts), "lower_bound_binds": binds,
            "lower_bound_memory_limited": activation_limit is not None}

def baselines_section(best: "Trial", ev: "Evaluation", evaluate, labels, deadline=None) -> dict[str, Baseline]:
    """Each baseline partition simulated under the plan's schedule and microbatch count. They
    are bounded by count (one evaluation each) and only report, so the work budget does not
    skip them (a plan's "vs plan" table is never empty for want of work); past the wall
    deadline of ``deadline`` (a ``solvers.schedule.search.budget.Deadline``, ``--time-limit``)
    the rest are marked skipped."""
    out = {}
    for label in labels:
        if label not in best.baselines:
            out[label] = Baseline.from_dict({"step_time_s": None, "status": "infeasible"})
            continue
        if deadline is not None and not deadline.wall_affords(1):
            out[label] = Baseline.from_dict({"step_time_s": None, "status": "skipped (time limit)"})
            continue
        bounds, _fits = best.baselines[label]
        b = evaluate(best.table, best.req, bounds, best.schedule, meter=None if deadline is None else deadline.meter)
        fits = not any("memory" in str(v) for v in b.violations)
        out[label] = Baseline.from_dict({
            "step_time_s": b.sim.step_time, "stages": [list(x) for x in bounds], "schedule": best.name,
            "microbatches": best.req.microbatches, "peak_memory_bytes": b.sim.peak_memory_bytes,
            "fits_memory": fits, "plan_speedup": b.sim.step_time / ev.sim.step_time if ev.sim.step_time else None})
    return out


def to_plan(best: "Trial", ev: "Evaluation", baselines: dict, tried: list[dict], refine: dict,
             wall: float) -> Plan:
    req, sim = best.req, ev.sim
    limit = memory_limit_of(req)
    activation_limit = None if limit is None else limit.activation_limit(ev.costs)
    flops = sum(ev.costs.flops) * req.microbatches * req.parallel.get("dp", 1)
    gpus = req.num_gpus or req.pp * req.parallel.get("dp", 1) * req.parallel.get("tp", 1)
    # the schedule's MFU; the front door (planner.api, through planner.planning.dp_step) replaces
    # it by the one prediction's, over the whole optimizer step ([Note: one step])
    mfu = flops / (sim.step_time * gpus * req.peak_flops) if req.peak_flops and sim.step_time else 0.0
    return Plan(
        model=ModelInfo.from_dict(req.model) if req.model else ModelInfo(name=best.table.model,
                                                                          num_layers=best.table.num_layers),
        cluster=req.cluster,
        parallel=Parallel(**req.parallel, pp=req.pp, vpp=req.vpp, placement=req.placement),
        microbatches=Microbatches(count=req.microbatches, size=req.microbatch_size),
        stages=partition_stages(ev.bounds, ev.ranks, devices=req.rank_devices,
                                limits=tuple(limit.per_rank_bytes(ev.costs)) if limit and limit.rank_bytes else ()),
        schedule=format_schedule(ev.schedule),
        stage_costs=stage_costs_to_dict(ev.costs),
        predicted=Predicted(
            step_time_s=sim.step_time,
            bubble_fraction=sim.bubble_fraction,
            mfu=mfu,
            peak_memory_bytes=sim.peak_memory_bytes,
            memory_limit_bytes=limit_bytes_of(req, ev.costs),
            **bound_record(ev.costs, req.microbatches, activation_limit),
            steady_step_time_s=ev.steady.period_s,
            steady_bubble_fraction=ev.steady.bubble_fraction,
            busy_s=sim.busy,
            critical_path=sim.critical_path_text()[:64],
        ),
        baselines={**baselines, "plan": Baseline.from_dict({"step_time_s": sim.step_time, "schedule": best.name,
                                                            "stages": [list(b) for b in ev.bounds],
                                                            "microbatches": req.microbatches})},
        solver=SolverRecord(name=f"{best.part.solver}+sim+{best.name}", status=best.part.status,
                            wall_s=wall, gap=best.part.gap, seed=req.seed, partition=req.partition,
                            schedule=best.name, estimate_s=best.part.estimate_s, objective=req.objective,
                            microbatch_search=req.search_microbatches, refine=refine,
                            pins=_pins(req), candidates=tried),
        costs={"source": best.table.source, "device": best.table.device, "scale": best.table.scale,
               "microbatch_size": best.table.microbatch_size, "seq_len": best.table.seq_len,
               **_modules(best.table), **_profile(best.table)},
    )


def _pins(req) -> dict:
    """The ``solver.pins`` record: first/last stage sizes, and every stage's range under ``--layout``."""
    stages = {} if req.pins.stages is None else {"stages": [list(b) for b in req.pins.stages]}
    return {"first": req.pins.first, "last": req.pins.last, **stages}


def _profile(table: CostTable) -> dict:
    """``{"profile": path, "profile_sha256": hex}`` for a table read from a file, so that
    ``ppplan replay`` reads the same profile again (``planner.replay.device.recorded_profile``)."""
    return {} if table.file is None else {"profile": table.file.path, "profile_sha256": table.file.sha256}


def _modules(table: CostTable) -> dict:
    """``{"modules": "transformers"|"native"}`` for a measured profile that records which layer
    code it timed (``meta.modules.source``), so that ``ppplan replay`` runs the same code."""
    source = (table.meta.get("modules") or {}).get("source") if isinstance(table.meta, dict) else None
    return {"modules": source} if isinstance(source, str) else {}
