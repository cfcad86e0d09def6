"""The main job: from costs and a cluster to a validated, simulated ``Plan``.

Passes chained in one place: choose partition -> generate schedule -> stage costs ->
simulate -> validate -> predictions and baselines. Engines (``solvers``) pick
partitions and orders; this module wires them and records what they did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from planner.core.costs import CostTable
from planner.core.errors import InfeasibleError
from planner.core.placement import stage_ranks
from planner.core.plan import Plan, stage_costs_to_dict
from planner.core.schedule import Schedule, format_schedule
from planner.core.simulate import SimResult, simulate
from planner.core.stage_costs import StageCosts, stage_costs
from planner.core.validate import validate
from solvers.inflight import max_in_flight
from solvers.partition import minmax_partition, uniform_partition, weighted_partition
from solvers.lower_bound import step_lower_bound
from solvers.schedules import SCHEDULES, candidate_schedules, generate

__all__ = ["PlanRequest", "make_plan", "evaluate"]


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """Everything the planner needs besides the cost table."""

    pp: int
    """Pipeline ranks."""
    vpp: int = 1
    """Stages per rank."""
    microbatches: int
    """Microbatches per step."""
    microbatch_size: int = 1
    """Sequences per microbatch."""
    memory_limit_bytes: int | None = None
    """Per-GPU memory limit; None = unlimited."""
    schedule: str = "auto"
    """Schedule name (see ``solvers.schedules.SCHEDULES``) or auto."""
    partition: str = "overlap"
    """overlap, serial, flops or uniform."""
    placement: str = "loop"
    """loop or v."""
    seed: int = 0
    """Seed for randomised solvers."""
    time_limit_s: float = 10.0
    """Budget for solvers that search."""
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


def _range_cost(table: CostTable, method: str, fused: bool):
    layers = table.layers
    if method == "serial" or not fused:
        p = [0.0]
        for lc in layers:
            p.append(p[-1] + lc.serial_f + lc.serial_i + lc.w)
        return lambda s, a, b: p[b] - p[a]
    from solvers.overlap_cost import OverlapRangeCost

    oc = OverlapRangeCost(table)
    return lambda s, a, b: oc.steady(a, b)


def _feasible(table: CostTable, req: PlanRequest, inflight: list[int]):
    if req.memory_limit_bytes is None:
        return None
    static = [0.0]
    act = [0.0]
    for lc in table.layers:
        static.append(static[-1] + lc.static_bytes)
        act.append(act[-1] + lc.act_bytes)
    share = req.memory_limit_bytes / req.vpp
    return lambda s, a, b: static[b] - static[a] + (act[b] - act[a]) * inflight[s] <= share


def choose_bounds(table: CostTable, req: PlanRequest, method: str, schedule: Schedule,
                  fused: bool) -> list[tuple[int, int]]:
    """Partition by ``method`` for a schedule shape (its in-flight counts bound memory)."""
    S = req.pp * req.vpp
    inflight = max_in_flight(schedule, S)
    feasible = _feasible(table, req, inflight)
    if method == "uniform":
        return uniform_partition([lc.role for lc in table.layers], S)
    if method == "flops":
        return weighted_partition([lc.flops for lc in table.layers], S, feasible)
    return minmax_partition(table.num_layers, S, _range_cost(table, method, fused), feasible)


def evaluate(table: CostTable, req: PlanRequest, bounds: list[tuple[int, int]],
             schedule: Schedule) -> Evaluation:
    """Stage costs, simulation and validation of one partition under one schedule."""
    ranks = stage_ranks(req.pp * req.vpp, req.pp, req.placement)
    sc = stage_costs(table, bounds, ranks)
    sim = simulate(schedule, sc)
    violations = validate(schedule, sc, num_microbatches=req.microbatches,
                          memory_limit_bytes=req.memory_limit_bytes)
    return Evaluation(bounds, ranks, schedule, sc, sim, violations)


def make_plan(table: CostTable, req: PlanRequest) -> Plan:
    """Plan ``table`` under ``req``: best valid (schedule, partition), with baselines."""
    t0 = time.perf_counter()
    tried, best, best_name = [], None, ""
    for name in candidate_schedules(req.schedule, table, vpp=req.vpp, placement=req.placement):
        sched = generate(name, pp=req.pp, vpp=req.vpp, microbatches=req.microbatches)
        fused = SCHEDULES[name].fused
        try:
            bounds = choose_bounds(table, req, req.partition, sched, fused)
        except InfeasibleError as exc:
            tried.append({"schedule": name, "status": "infeasible", "reason": str(exc)})
            continue
        ev = evaluate(table, req, bounds, sched)
        tried.append({"schedule": name, "step_time_s": ev.sim.step_time,
                      "status": "valid" if not ev.violations else str(ev.violations[0])})
        if not ev.violations and (best is None or ev.sim.step_time < best.sim.step_time):
            best, best_name = ev, name
    if best is None:
        raise InfeasibleError(_infeasible_message(table, req, tried))
    baselines = _baselines(table, req, best_name, best)
    return _to_plan(table, req, best, best_name, baselines, tried, time.perf_counter() - t0)


def _infeasible_message(table: CostTable, req: PlanRequest, tried: list[dict]) -> str:
    sched = generate("1f1b", pp=req.pp, vpp=req.vpp, microbatches=req.microbatches)
    inflight = max_in_flight(sched, req.pp * req.vpp)
    bounds = uniform_partition([lc.role for lc in table.layers], req.pp * req.vpp)
    worst = max(range(len(bounds)), key=lambda s: sum(
        table.layers[k].static_bytes + table.layers[k].act_bytes * inflight[s]
        for k in range(*bounds[s])))
    a, b = bounds[worst]
    need = sum(table.layers[k].static_bytes + table.layers[k].act_bytes * inflight[worst] for k in range(a, b))
    limit = req.memory_limit_bytes or 0
    return (f"no plan fits the memory limit: even balanced, stage {worst} (layers [{a}, {b}),"
            f" {inflight[worst]} microbatches in flight) needs {need / 2**30:.1f} GiB of "
            f"{limit / 2**30:.1f} GiB available; raise pp, lower microbatch size or in-flight "
            "microbatches, or turn on recomputation (training.recompute)")


def _baselines(table: CostTable, req: PlanRequest, name: str, best: Evaluation) -> dict:
    out = {}
    fused = SCHEDULES[name].fused
    for label, method in (("uniform", "uniform"), ("flops_balanced", "flops"),
                          ("serial_balanced", "serial")):
        try:
            bounds = choose_bounds(table, req.__class__(**{**req.__dict__, "memory_limit_bytes": None}),
                                   method, best.schedule, fused)
        except InfeasibleError as exc:
            out[label] = {"step_time_s": None, "status": str(exc)}
            continue
        ev = evaluate(table, req, bounds, best.schedule)
        out[label] = {"step_time_s": ev.sim.step_time, "stages": [list(b) for b in bounds],
                      "schedule": name, "peak_memory_bytes": ev.sim.peak_memory_bytes,
                      "fits_memory": not any("memory" in str(v) for v in ev.violations)}
    return out


def _to_plan(table: CostTable, req: PlanRequest, ev: Evaluation, name: str, baselines: dict,
             tried: list[dict], wall: float) -> Plan:
    sim = ev.sim
    flops = sum(ev.costs.flops) * req.microbatches * req.parallel.get("dp", 1)
    gpus = req.num_gpus or req.pp * req.parallel.get("dp", 1) * req.parallel.get("tp", 1)
    mfu = flops / (sim.step_time * gpus * req.peak_flops) if req.peak_flops and sim.step_time else 0.0
    return Plan(
        model=req.model or {"name": table.model, "num_layers": table.num_layers},
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
        baselines={**baselines, "plan": {"step_time_s": sim.step_time,
                                         "stages": [list(b) for b in ev.bounds], "schedule": name}},
        solver={"name": f"minmax-dp+{name}", "status": "OPTIMAL" if req.partition != "uniform" else "FIXED",
                "wall_s": wall, "gap": None, "seed": req.seed, "partition": req.partition,
                "schedule": name, "candidates": tried},
        costs={"source": table.source, "device": table.device, "scale": table.scale,
               "microbatch_size": table.microbatch_size, "seq_len": table.seq_len},
    )
