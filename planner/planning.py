"""The main job: from costs and a cluster to a validated, simulated ``Plan``.

Passes chained in one place. For each microbatch count (one, or every feasible count
with ``--microbatches auto``) and each candidate schedule order:

1. partition (``solvers.partition_search``): candidates from the method's solver, plus
   the baseline partitions (uniform, flops_balanced, serial_balanced) when they fit;
2. simulate every candidate with the same simulator and schedule (compiled once);
   the fastest that fits memory wins, so the plan is never slower than a baseline;
3. the overall winner's partition is refined by moving boundaries under the
   simulator (``solvers.local_search``) and validated;
4. the schedule order is re-chosen for the winner's stage costs
   (``solvers.schedules.best_schedule``); under that final order the fitting baseline
   partitions are simulated again and the fastest valid partition is kept, and the
   baselines are reported beside it for the same microbatch count and schedule.

Every (count, schedule) tried is recorded under ``solver.candidates``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from planner.core.costs import CostTable
from planner.core.errors import InfeasibleError
from planner.core.placement import stage_ranks
from planner.core.plan import Plan, stage_costs_to_dict
from planner.core.schedule import Schedule, format_schedule
from planner.core.simulate import Compiled, SimResult, compile_schedule, simulate, simulate_compiled
from planner.core.stage_costs import StageCosts, stage_costs
from planner.core.validate import validate
from solvers.local_search import refine_partition
from solvers.lower_bound import step_lower_bound
from solvers.microbatch_search import MicrobatchOption, microbatch_options, table_for
from solvers.partition_pins import StagePins, pinned_cuts
from solvers.partition_search import PartitionResult, partition_for_schedule
from solvers.memory_limit import MemoryLimit
from solvers.schedules import ScheduleChoice, best_schedule, candidate_schedules, generate

__all__ = ["PlanRequest", "Evaluation", "make_plan", "evaluate", "BASELINES"]

BASELINES = (("uniform", "uniform"), ("flops_balanced", "flops"), ("serial_balanced", "serial"))
"""(label in ``Plan.baselines``, partition method)."""


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """Everything the planner needs besides the cost table."""

    pp: int
    """Pipeline ranks."""
    vpp: int = 1
    """Stages per rank."""
    microbatches: int
    """Microbatches per step (ignored when ``search_microbatches``)."""
    microbatch_size: int = 1
    """Sequences per microbatch (the cost table's size)."""
    search_microbatches: bool = False
    """Try every count dividing ``batch_per_replica`` (``--microbatches auto``)."""
    batch_per_replica: int | None = None
    """Sequences per data-parallel replica per step; default microbatches x microbatch_size."""
    memory_limit_bytes: int | None = None
    """Per-GPU memory limit; None = unlimited."""
    schedule: str = "auto"
    """Schedule name (see ``solvers.schedules.SCHEDULES``) or auto."""
    partition: str = "overlap"
    """overlap, serial, flops or uniform."""
    pins: StagePins = field(default_factory=StagePins)
    """Decoder layers pinned on the first/last stage."""
    placement: str = "loop"
    """loop or v."""
    seed: int = 0
    """Seed for randomised solvers."""
    time_limit_s: float = 10.0
    """Budget for solvers that search."""
    memory_limit_microbatches: float | None = None
    """[issue 4] Activation budget per rank in microbatches' worth (``--memory-limit 4mb``),
    on top of ``memory_limit_bytes``; None = bytes only."""
    deadlines: dict = field(default_factory=dict)
    """[issue 4] (stage, kind, microbatch) -> latest end in seconds (``--deadline``)."""
    model: dict = field(default_factory=dict)
    """Plan ``model`` section (name, num_layers, layout, layer_types)."""
    cluster: dict = field(default_factory=dict)
    """Plan ``cluster`` section."""
    parallel: dict = field(default_factory=dict)
    """tp, ep, dp (pp and vpp come from the fields above)."""
    peak_flops: float | None = None
    """Per-GPU peak for MFU; None = MFU not reported (0)."""
    num_gpus: int | None = None
    """GPUs in the job (MFU denominator); default pp x dp x tp."""


@dataclass
class Evaluation:
    """One (partition, schedule) simulated."""

    bounds: list[tuple[int, int]]
    ranks: list[int]
    schedule: Schedule
    costs: StageCosts
    sim: SimResult
    violations: list


@dataclass
class _Trial:
    """The best partition found for one (microbatch count, schedule)."""

    table: CostTable
    req: PlanRequest
    name: str
    schedule: Schedule
    compiled: Compiled
    part: PartitionResult
    bounds: list[tuple[int, int]]
    step: float
    baselines: dict[str, tuple[list[tuple[int, int]], bool]]


def evaluate(table: CostTable, req: PlanRequest, bounds: list[tuple[int, int]],
             schedule: Schedule) -> Evaluation:
    """Stage costs, simulation and validation of one partition under one schedule."""
    ranks = stage_ranks(req.pp * req.vpp, req.pp, req.placement)
    sc = stage_costs(table, bounds, ranks)
    sim = simulate(schedule, sc)
    violations = validate(schedule, sc, num_microbatches=req.microbatches,
                          memory_limit_bytes=req.memory_limit_bytes)
    return Evaluation(bounds, ranks, schedule, sc, sim, violations)


def _options(req: PlanRequest) -> list[MicrobatchOption]:
    if not req.search_microbatches:
        return [MicrobatchOption(count=req.microbatches, size=req.microbatch_size)]
    batch = req.batch_per_replica or req.microbatches * req.microbatch_size
    return microbatch_options(batch, pp=req.pp)


def make_plan(table: CostTable, req: PlanRequest) -> Plan:
    """Plan ``table`` under ``req``: best valid (microbatches, schedule, partition), with baselines."""
    t0 = time.perf_counter()
    tried: list[dict] = []
    best: _Trial | None = None
    options = _options(req)
    for opt in options:
        tab = table_for(table, opt)
        r = replace(req, microbatches=opt.count, microbatch_size=opt.size)
        for name in candidate_schedules(req.schedule, tab, vpp=req.vpp, placement=req.placement):
            trial = _try(tab, r, name, tried, req.time_limit_s / len(options))
            if trial is not None and (best is None or trial.step < best.step):
                best = trial
    if best is None:
        raise InfeasibleError(_failure(tried))
    refine = _refine(best, deadline=t0 + 3 * req.time_limit_s)
    ev = evaluate(best.table, best.req, best.bounds, best.schedule)
    if ev.violations:
        raise InfeasibleError(f"internal: the chosen plan breaks a check: {ev.violations[0]}")
    # [issue 4: schedule solver] re-choose the order for the chosen partition's stage costs
    choice = _choose_schedule(best, ev)
    if choice.schedule != best.schedule:
        best.name, best.schedule = choice.name, choice.schedule
        ev = _settle(best, evaluate(best.table, best.req, best.bounds, best.schedule))
    baselines = _baselines(best, ev)
    plan = _to_plan(best, ev, baselines, tried, refine, time.perf_counter() - t0)
    _record_schedule(plan, choice, ev.costs, _memory_limit(req))
    return plan


def _settle(best: _Trial, ev: Evaluation) -> Evaluation:
    """Under the final schedule, keep the fastest valid of the plan's partition and the
    baseline partitions that fit (the order was adapted to the plan's costs, so a baseline
    could now be faster: then it is the plan, and the plan never loses to a baseline)."""
    if best.req.partition != "overlap":
        return ev
    for bounds, fits in best.baselines.values():
        if not fits or bounds == ev.bounds:
            continue
        other = evaluate(best.table, best.req, bounds, best.schedule)
        if not other.violations and other.sim.step_time < ev.sim.step_time * (1 - 1e-12):
            ev = other
    best.bounds, best.step = ev.bounds, ev.sim.step_time
    return ev


def _memory_limit(req: PlanRequest) -> MemoryLimit | None:
    """[issue 4] The request's limits as one ``MemoryLimit`` (None when there is none)."""
    if req.memory_limit_bytes is None and req.memory_limit_microbatches is None:
        return None
    return MemoryLimit(bytes=req.memory_limit_bytes, microbatches=req.memory_limit_microbatches)


def _choose_schedule(best: _Trial, ev: Evaluation) -> ScheduleChoice:
    """[issue 4] Heuristics (+ CP-SAT for auto/cpsat) on the plan's stage costs (solvers.schedules)."""
    req = best.req
    return best_schedule(ev.costs, microbatches=req.microbatches, memory_limit=_memory_limit(req),
                         deadlines=req.deadlines, method=req.schedule, time_limit=req.time_limit_s,
                         seed=req.seed, start=(best.name, best.schedule))


def _record_schedule(plan: Plan, choice: ScheduleChoice, costs: StageCosts, limit: MemoryLimit | None) -> None:
    """[issue 4] Lower bound, schedule status and gap into the plan."""
    plan.predicted["lower_bound_s"] = choice.lower_bound
    if limit is not None and limit.microbatches is not None:
        plan.predicted["memory_limit_bytes"] = limit.per_gpu_bytes(costs)
        plan.predicted["memory_limit"] = str(limit)
    plan.solver["schedule_solver"] = {
        "name": choice.name, "status": choice.status, "gap": choice.gap,
        "lower_bound_s": choice.lower_bound, "wall_s": choice.wall_s, "candidates": choice.tried}


def _try(table: CostTable, req: PlanRequest, name: str, tried: list[dict], budget: float) -> _Trial | None:
    """Partition and simulate one (count, schedule); records what happened in ``tried``."""
    entry = {"microbatches": req.microbatches, "microbatch_size": req.microbatch_size, "schedule": name}
    tried.append(entry)
    common = dict(pp=req.pp, vpp=req.vpp, placement=req.placement, memory_limit_bytes=req.memory_limit_bytes,
                  pins=req.pins, time_limit_s=budget, seed=req.seed)
    try:
        sched = generate(name, pp=req.pp, vpp=req.vpp, microbatches=req.microbatches)
        part = partition_for_schedule(table, sched, method=req.partition, **common)
    except InfeasibleError as exc:
        entry.update(status="infeasible", reason=str(exc))
        return None
    baselines = {}
    for label, method in BASELINES:
        try:
            res = partition_for_schedule(table, sched, method=method, strict=False, **common)
            baselines[label] = (res.candidates[0], res.fits_memory)
        except InfeasibleError as exc:  # e.g. uniform with fewer decoder layers than stages
            entry.setdefault("baseline_errors", {})[label] = str(exc)
    ranks = part.model.ranks
    comp = compile_schedule(sched, len(ranks), ranks)
    pool = list(part.candidates)
    if req.partition == "overlap":
        pool += [b for b, fits in baselines.values() if fits and b not in pool]
    step, bounds = min(((_simulate(table, comp, b, ranks, req.memory_limit_bytes), k, b)
                        for k, b in enumerate(pool)), key=lambda t: (t[0], t[1]))[0::2]
    entry.update(status="valid" if step < float("inf") else "infeasible", step_time_s=step,
                 estimate_s=part.estimate_s, partition_solver=part.solver, partition_status=part.status,
                 stage_layers=[b - a for a, b in bounds], evaluated=len(pool))
    if step == float("inf"):
        entry["reason"] = "no candidate partition fits memory in simulation"
        return None
    return _Trial(table, req, name, sched, comp, part, bounds, step, baselines)


def _simulate(table: CostTable, comp: Compiled, bounds, ranks: list[int], limit: int | None) -> float:
    sim = simulate_compiled(comp, stage_costs(table, bounds, ranks))
    if limit is not None and max(sim.peak_memory_bytes) > limit:
        return float("inf")
    return sim.step_time


def _refine(best: _Trial, *, deadline: float) -> dict:
    """Move boundaries under the simulator (overlap method only); updates ``best`` in place."""
    if best.req.partition != "overlap":
        return {"rounds": 0, "evaluated": 0}
    limit = best.req.memory_limit_bytes
    roles = [lc.role for lc in best.table.layers]
    pinned = frozenset(pinned_cuts(best.req.pins, roles, len(best.bounds))) if best.req.pins.any else frozenset()
    res = refine_partition(best.table, best.schedule, best.bounds, best.part.model.ranks,
                           fits=None if limit is None else (lambda peaks: max(peaks) <= limit),
                           pinned=pinned, max_rounds=32, deadline=deadline, compiled=best.compiled)
    if res.step_time < best.step:
        best.bounds, best.step = res.bounds, res.step_time
    return {"rounds": res.rounds, "evaluated": res.evaluated}


def _failure(tried: list[dict]) -> str:
    """The most useful reason when nothing fits: a memory message if there is one."""
    reasons = [t.get("reason", "") for t in tried]
    memory = [r for r in reasons if "memory" in r]
    head = memory[0] if memory else (reasons[0] if reasons else "no schedule candidates")
    if len(tried) > 1:
        head += f" ({len(tried)} microbatch/schedule combinations tried, none fits)"
    return head


def _baselines(best: _Trial, ev: Evaluation) -> dict:
    out = {}
    for label, _ in BASELINES:
        if label not in best.baselines:
            out[label] = {"step_time_s": None, "status": "infeasible"}
            continue
        bounds, _fits = best.baselines[label]
        b = evaluate(best.table, best.req, bounds, best.schedule)
        fits = not any("memory" in str(v) for v in b.violations)
        out[label] = {"step_time_s": b.sim.step_time, "stages": [list(x) for x in bounds],
                      "schedule": best.name, "microbatches": best.req.microbatches,
                      "peak_memory_bytes": b.sim.peak_memory_bytes, "fits_memory": fits,
                      "plan_speedup": b.sim.step_time / ev.sim.step_time if ev.sim.step_time else None}
    return out


def _to_plan(best: _Trial, ev: Evaluation, baselines: dict, tried: list[dict], refine: dict,
             wall: float) -> Plan:
    req, sim = best.req, ev.sim
    flops = sum(ev.costs.flops) * req.microbatches * req.parallel.get("dp", 1)
    gpus = req.num_gpus or req.pp * req.parallel.get("dp", 1) * req.parallel.get("tp", 1)
    mfu = flops / (sim.step_time * gpus * req.peak_flops) if req.peak_flops and sim.step_time else 0.0
    return Plan(
        model=req.model or {"name": best.table.model, "num_layers": best.table.num_layers},
        cluster=req.cluster,
        parallel={**req.parallel, "pp": req.pp, "vpp": req.vpp, "placement": req.placement},
        microbatches={"count": req.microbatches, "size": req.microbatch_size},
        stages=[{"stage": s, "rank": r, "layers": [a, b]}
                for s, ((a, b), r) in enumerate(zip(ev.bounds, ev.ranks))],
        schedule=format_schedule(ev.schedule),
        stage_costs=stage_costs_to_dict(ev.costs),
        predicted={
            "step_time_s": sim.step_time,
            "bubble_fraction": sim.bubble_fraction,
            "mfu": mfu,
            "peak_memory_bytes": sim.peak_memory_bytes,
            "memory_limit_bytes": req.memory_limit_bytes,
            "lower_bound_s": step_lower_bound(ev.costs, req.microbatches),
            "busy_s": sim.busy,
            "critical_path": sim.critical_path_text()[:64],
        },
        baselines={**baselines, "plan": {"step_time_s": sim.step_time, "schedule": best.name,
                                         "stages": [list(b) for b in ev.bounds],
                                         "microbatches": req.microbatches}},
        solver={"name": f"{best.part.solver}+sim+{best.name}", "status": best.part.status,
                "wall_s": wall, "gap": best.part.gap, "seed": req.seed, "partition": req.partition,
                "schedule": best.name, "estimate_s": best.part.estimate_s,
                "microbatch_search": req.search_microbatches, "refine": refine,
                "pins": {"first": req.pins.first, "last": req.pins.last}, "candidates": tried},
        costs={"source": best.table.source, "device": best.table.device, "scale": best.table.scale,
               "microbatch_size": best.table.microbatch_size, "seq_len": best.table.seq_len},
    )
