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
from planner.core.plan import Plan
from planner.core.schedule import Schedule
from planner.core.simulate import Compiled, SimResult, compile_schedule, simulate, simulate_compiled
from planner.core.stage_costs import StageCosts, stage_costs
from planner.core.validate import validate
from planner.plan_assembly import baselines_section, to_plan
from planner.progress import note
from solvers.joint import alternate
from solvers.local_search import refine_partition
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
    """Plan ``table`` under ``req``: best valid (microbatches, schedule, partition), with baselines.

    With the defaults (``schedule="auto"``, ``partition="overlap"``) this is the joint
    search of ``_joint``; otherwise the one fixed family or method is planned directly.
    """
    t0 = time.perf_counter()
    tried: list[dict] = []
    trials: list[_Trial] = []
    options = _options(req)
    for opt in options:
        tab = table_for(table, opt)
        r = replace(req, microbatches=opt.count, microbatch_size=opt.size)
        for name in candidate_schedules(req.schedule, tab, vpp=req.vpp, placement=req.placement):
            trial = _try(tab, r, name, tried, req.time_limit_s / len(options))
            if trial is not None:
                trials.append(trial)
                note(f"{len(tried)} candidates, best {min(t.step for t in trials):.4g} s")
    if not trials:
        raise InfeasibleError(_failure(tried))
    trials.sort(key=lambda t: t.step)  # stable: ties keep enumeration order
    joint = req.schedule == "auto" and req.partition == "overlap"
    if joint:
        finalists, refine = _joint(trials, tried)
    else:
        finalists = trials[:1]
        refine = _refine(finalists[0], deadline=t0 + 3 * req.time_limit_s)
    best, ev, choice = _polish_finalists(finalists[:JOINT_POLISHED if joint else 1], tried)
    baselines = baselines_section(best, ev, evaluate, [label for label, _ in BASELINES])
    plan = to_plan(best, ev, baselines, tried, refine, time.perf_counter() - t0)
    plan.solver["winner"] = _why(plan, tried)
    _record_schedule(plan, choice, ev.costs, _memory_limit(req))
    return plan


JOINT_SHORTLIST = 3
"""Screened (microbatches, schedule, partition) candidates refined jointly."""
JOINT_ROUNDS = 3
"""Bound on schedule <-> partition alternation rounds per finalist."""
JOINT_POLISHED = 2
"""Finalists whose schedule CP-SAT polishes (each within ``--time-limit``, at most 2 s for auto)."""


def _joint(trials: list[_Trial], tried: list[dict]) -> tuple[list[_Trial], dict]:
    """Joint search, phase 2: alternate schedule choice and boundary moves on the best few
    screened candidates (``solvers.joint.alternate``); returns them fastest first.

    Phase 1 is the screening in ``make_plan`` (every microbatch count x schedule family,
    each with its partition candidates and the fitting baselines simulated); the baseline
    partitions that fit are candidates here too, so a partition that only wins once the
    schedule adapts to it is not lost. Phase 3 (``_polish_finalists``) gives the best
    ``JOINT_POLISHED`` CP-SAT. This phase is bounded by counts (finalists, rounds, moves),
    not by the clock, so the plan depends only on the inputs and the seed; the clock
    bounds only the CP-SAT parts, in its deterministic time.
    """
    finalists = _shortlist(trials)
    refine: dict = {"rounds": 0, "evaluated": 0, "finalists": []}
    for t in finalists:
        entry = {"phase": "joint", "microbatches": t.req.microbatches, "start": t.name,
                 "start_stage_layers": [b - a for a, b in t.bounds], "start_step_time_s": t.step}
        refine["finalists"].append(entry)
        moved = _refine(t, deadline=None)  # boundaries under the screened order first
        refine["rounds"] += moved["rounds"]
        refine["evaluated"] += moved["evaluated"]
        res = alternate(t.table, t.bounds, t.part.model.ranks, (t.name, t.schedule),
                        microbatches=t.req.microbatches, memory_limit=_memory_limit(t.req),
                        limit_bytes=t.req.memory_limit_bytes, deadlines=t.req.deadlines,
                        pinned=_pinned(t), max_rounds=JOINT_ROUNDS, seed=t.req.seed)
        entry.update(status="valid", schedule=res.name, step_time_s=res.step_time,
                     stage_layers=[b - a for a, b in res.bounds], rounds=res.history)
        tried.append(entry)
        if res.step_time < t.step * (1 - 1e-9):
            t.bounds, t.schedule, t.name, t.step = res.bounds, res.schedule, res.name, res.step_time
        note(f"{len(tried)} candidates, best {min(f.step for f in finalists):.4g} s")
    return sorted(finalists, key=lambda t: t.step), refine


def _shortlist(trials: list[_Trial]) -> list[_Trial]:
    """The ``JOINT_SHORTLIST`` fastest distinct (microbatches, partition) starts among the
    screened trials and their fitting baseline partitions (same schedule order)."""
    pool = list(trials)
    for t in trials:
        for bounds, fits in t.baselines.values():
            if fits and bounds != t.bounds:
                step = _simulate(t.table, t.compiled, bounds, t.part.model.ranks, t.req.memory_limit_bytes)
                if step < float("inf"):
                    pool.append(replace(t, bounds=bounds, step=step))
    pool.sort(key=lambda t: t.step)
    out: list[_Trial] = []
    for t in pool:
        if all((t.req.microbatches, t.bounds) != (f.req.microbatches, f.bounds) for f in out):
            out.append(t)
        if len(out) == JOINT_SHORTLIST:
            break
    return out


def _polish_finalists(finalists: list[_Trial], tried: list[dict]) -> tuple[_Trial, Evaluation, ScheduleChoice]:
    """Phase 3: re-choose each finalist's order for its stage costs (heuristics, and CP-SAT
    for auto/cpsat: ``_choose_schedule``); the fastest valid result wins."""
    best = None
    for t in finalists:
        ev = evaluate(t.table, t.req, t.bounds, t.schedule)
        if ev.violations:
            continue
        choice = _choose_schedule(t, ev)
        if choice.schedule != t.schedule:
            other = evaluate(t.table, t.req, t.bounds, choice.schedule)
            if not other.violations and other.sim.step_time < ev.sim.step_time * (1 - 1e-9):
                t.name, t.schedule, ev = choice.name, choice.schedule, other
        ev = _settle(t, ev)
        if len(finalists) > 1:
            tried.append({"phase": "polish", "microbatches": t.req.microbatches, "schedule": t.name,
                          "status": "valid", "step_time_s": ev.sim.step_time,
                          "stage_layers": [b - a for a, b in t.bounds]})
        if best is None or ev.sim.step_time < best[1].sim.step_time * (1 - 1e-9):
            best = (t, ev, choice)
    if best is None:
        raise InfeasibleError("internal: no finalist passes the validator")
    return best


def _pinned(t: _Trial) -> frozenset[int]:
    roles = [lc.role for lc in t.table.layers]
    return frozenset(pinned_cuts(t.req.pins, roles, len(t.bounds))) if t.req.pins.any else frozenset()


def _why(plan: Plan, tried: list[dict]) -> str:
    """One line on why the winner won: its step time against the runner-up's."""
    step = plan.predicted["step_time_s"]
    others = sorted({round(e["step_time_s"], 12) for e in tried
                     if e.get("step_time_s") not in (None, float("inf"))
                     and e.get("microbatches", 0) != 0} - {round(step, 12)})
    valid = sum(1 for e in tried if e.get("status") == "valid")
    text = (f"fastest simulated step ({step:.4g} s) among {valid} valid candidates that fit memory"
            f" ({len(tried)} tried)")
    slower = [o for o in others if o > step]
    if slower:
        text += f"; the next best screened or refined candidate takes {slower[0]:.4g} s" \
                f" ({slower[0] / step - 1:+.1%})"
    return text


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


def _refine(best: _Trial, *, deadline: float | None) -> dict:
    """Move boundaries under the simulator (overlap method only); updates ``best`` in place."""
    if best.req.partition != "overlap":
        return {"rounds": 0, "evaluated": 0}
    limit = best.req.memory_limit_bytes
    res = refine_partition(best.table, best.schedule, best.bounds, best.part.model.ranks,
                           fits=None if limit is None else (lambda peaks: max(peaks) <= limit),
                           pinned=_pinned(best), max_rounds=32, deadline=deadline, compiled=best.compiled)
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


