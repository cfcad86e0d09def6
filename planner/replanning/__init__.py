"""Offline re-planning after MoE routing drift: drift report, new plan, migration, advice.

Passes, in order:

1. Rebuild the job from the old plan (``planner.replanning.inputs``) and read the routing
   traces (``inputs.read_traces``: Megatron's per-rank logs against the plan's layout,
   ``planner.replanning.megatron_layout``, or a single-file trace): per MoE layer, the busiest-EP-rank
   imbalance and MaxVio now, and then (the plan's ``routing`` section, ``then``
   traces, or balanced).
2. Cost tables for then and now (``planner.replanning.costs``); the old plan's partition
   and schedule re-timed under both with the same simulator: the step time the plan
   was made for and the one it has now, per-stage slowdown, whether it still fits
   memory.
3. Re-plan: the front door (``make_plan``) on the new costs, then the move-penalised
   search (``planner.replanning.search``, [Note: move penalty]) seeded from the old and
   the new partition.
4. Migration (``planner.replanning.migration``) and the recommendation: ``replan`` when
   the old plan no longer fits memory, or when the gain
   ``(old step - new step) / old step`` reaches ``min_gain`` (hysteresis: noise below
   it never triggers a change); ``keep`` otherwise.

The returned plan carries ``replan`` and ``routing`` sections (``Plan.extra``); the
next ``replan`` of that plan compares against its ``routing``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from planner.core.errors import InputError
from planner.core.plan_records import Baseline
from planner.core.plan import Plan, load_plan_file, partition_stages, stage_costs_to_dict
from planner.core.schedule import format_schedule, parse_schedule
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts, stage_costs
from planner.core.validate import validate
from planner.planning import PlanRequest, evaluate, make_plan
from solvers.schedule.search.budget import check_work
from planner.planning.delivery import deliver
from planner.planning.dp_step import add_dp_step
from planner.replanning.costs import routed_costs
from planner.replanning.inputs import (plan_cluster, plan_model, plan_request, plan_routing, read_traces,
                                       routing_section)
from planner.replanning.migration import Migration, migration
from planner.replanning.search import DEFAULT_MOVE_PENALTY, Candidate, PartitionSearch, layer_ranks
from planner.simulation import plan_mfu
from profiler.routing import RoutingSummary, layer_factors
from planner.planning.assembly import bound_record
from planner.planning.records import memory_limit_of

__all__ = ["LayerDrift", "StageDrift", "ReplanResult", "replan", "DEFAULT_MIN_GAIN"]

DEFAULT_MIN_GAIN = 0.03
"""Smallest relative step-time gain that recommends a re-partition."""


@dataclass(frozen=True, kw_only=True)
class LayerDrift:
    """Routing of one MoE layer then (what the plan assumed) and now (the traces)."""

    layer: int
    """ModelSpec layer index."""
    type: str
    """Layer type key."""
    then_imbalance: float
    """Busiest EP rank / mean the old plan's costs assumed."""
    now_imbalance: float
    """Busiest EP rank / mean in the traces."""
    then_max_vio: float
    """MaxVio then (0 when the plan assumed balanced routing)."""
    now_max_vio: float
    """MaxVio in the traces."""


@dataclass(frozen=True, kw_only=True)
class StageDrift:
    """One stage of the old plan: per-microbatch F + I + W then and now."""

    stage: int
    """Stage index."""
    rank: int
    """Pipeline rank."""
    layers: tuple[int, int]
    """Layer range [start, end)."""
    then_s: float
    """F + I + W (exposed all-to-all included) under the old routing, seconds."""
    now_s: float
    """The same under the new routing, seconds."""

    @property
    def slowdown(self) -> float:
        """now / then - 1."""
        return self.now_s / self.then_s - 1.0 if self.then_s > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class ReplanResult:
    """Everything ``ppplan replan`` reports."""

    plan: Plan
    """The re-planned plan, with ``replan`` and ``routing`` sections."""
    layers: tuple[LayerDrift, ...]
    """Per MoE layer routing then and now."""
    stages: tuple[StageDrift, ...]
    """Per stage of the old plan, cost then and now."""
    then_step_s: float
    """Old plan, old routing (re-derived)."""
    old_step_s: float
    """Old plan, new routing."""
    old_problem: str
    """Why the old plan is invalid under the new routing (memory), empty when it is valid."""
    new_step_s: float
    """Chosen plan, new routing."""
    best_step_s: float
    """Fastest plan found for the new routing, ignoring the move penalty."""
    migration: Migration
    """Layers that move and what it costs."""
    recommended: bool
    """Whether to switch to ``plan``."""
    reason: str
    """One line explaining ``recommended``."""

    @property
    def gain(self) -> float:
        """(old step - new step) / old step, both under the new routing."""
        return (self.old_step_s - self.new_step_s) / self.old_step_s

    @property
    def gap_recovered(self) -> float | None:
        """Share of (old step - best step) the chosen plan recovers; None when there is no gap."""
        gap = self.old_step_s - self.best_step_s
        return (self.old_step_s - self.new_step_s) / gap if gap > 1e-12 else None


def replan(plan: Plan | str | Path, routing: list[str | Path], *, window: int | None = None,
           min_gain: float = DEFAULT_MIN_GAIN, move_penalty: float = DEFAULT_MOVE_PENALTY,
           then: list[str | Path] | None = None, profile: str | Path | None = None,
           model: str | None = None, routing_format: str = "auto", tp_pp_dp_mapping: bool = False,
           expert_tp: int | None = None, work: float | None = None) -> ReplanResult:
    """Re-plan ``plan`` for the routing in ``routing`` traces (see the module doc).

    ``routing_format`` is one of ``profiler.routing.FORMATS`` (for ``routing`` and ``then``);
    Megatron's per-rank logs are read against the plan's layout, with Megatron's rank order
    (``tp_pp_dp_mapping``: the run used ``--use-tp-pp-dp-mapping``) and its
    ``--expert-tensor-parallel-size`` (``expert_tp``, default the plan's tp). ``work`` is the
    re-plan's search budget (default: the one the plan was made with; [Note: work budget]
    in ``solvers.schedule.search.budget``).
    """
    if min_gain < 0 or move_penalty < 0:
        raise InputError("--min-gain" if min_gain < 0 else "--move-penalty", "must be >= 0")
    old = plan if isinstance(plan, Plan) else load_plan_file(plan)
    old.require_one_device("ppplan replan")
    spec, cluster = plan_model(old, model), plan_cluster(old)
    run = {"fmt": routing_format, "tp_pp_dp_mapping": tp_pp_dp_mapping, "expert_tp": expert_tp}
    now = read_traces(old, spec, list(routing), window=window, **run)
    before = read_traces(old, spec, list(then), **run) if then else plan_routing(old, spec)
    profile = _profile_path(old, profile)
    table_then = routed_costs(spec, cluster, _factors(before, spec), profile=profile)
    table_now = routed_costs(spec, cluster, layer_factors(now, spec), profile=profile)
    sc_then, sc_now, then_step, old_step, problem = _old_plan_under(old, table_then, table_now)
    req = plan_request(old, spec, cluster, table_now)
    if work is not None:
        req = replace(req, work_s=check_work(work))
    fresh = make_plan(table_now, req)
    search = _search(table_now, req, old, fresh, move_penalty * old_step)
    chosen, new_plan = _choose(search, table_now, req, old, fresh)
    add_dp_step(new_plan, spec, cluster)  # the one prediction, for the partition and order chosen
    old_ranks = layer_ranks(old.bounds(), old.ranks())
    move = migration(table_now, cluster, old_ranks, layer_ranks(chosen.bounds, new_plan.ranks()))
    same = not move.moves and new_plan.schedule == old.schedule
    recommended, reason = _decide(old_step, chosen.step_time_s, min_gain, problem, same)
    result = ReplanResult(
        plan=new_plan, layers=_layer_drift(spec, before, now),
        stages=_stage_drift(old.bounds(), old.ranks(), sc_then, sc_now), then_step_s=then_step,
        old_step_s=old_step, old_problem=problem, new_step_s=chosen.step_time_s,
        best_step_s=search.best(penalised=False).step_time_s, migration=move,
        recommended=recommended, reason=reason)
    fresh_moved = sum(a != b for a, b in zip(old_ranks, layer_ranks(fresh.bounds(), fresh.ranks())))
    new_plan.extra["replan"] = _replan_section(result, old, min_gain, move_penalty, fresh, fresh_moved)
    new_plan.extra["routing"] = routing_section(now, list(routing), window, fmt=routing_format)
    return replace(result, plan=deliver(new_plan))  # [Note: delivered plans]


def _old_plan_under(old: Plan, table_then, table_now) -> tuple[StageCosts, StageCosts, float, float, str]:
    """The old partition and order re-timed under both routings; its first violation now."""
    sched, bounds, ranks = old.parsed_schedule(), old.bounds(), old.ranks()
    sc_then, sc_now = stage_costs(table_then, bounds, ranks), stage_costs(table_now, bounds, ranks)
    problems = validate(sched, sc_now, num_microbatches=old.num_microbatches,
                        memory_limit_bytes=old.memory_limit_bytes)
    return (sc_then, sc_now, simulate(sched, sc_then).step_time, simulate(sched, sc_now).step_time,
            str(problems[0]) if problems else "")


def _profile_path(old: Plan, profile: str | Path | None) -> str | Path | None:
    if profile is not None:
        return profile
    recorded = old.costs.get("profile")
    if recorded:
        return recorded
    if old.costs.get("source", "analytical") != "analytical":
        raise InputError("plan.costs.source", f"the plan was made from {old.costs['source']} costs",
                         "pass --profile with the cost table it was made from")
    return None


def _factors(summary: RoutingSummary | None, spec) -> list[float]:
    return layer_factors(summary, spec) if summary is not None else [1.0] * spec.num_layers


def _search(table, req: PlanRequest, old: Plan, fresh: Plan, penalty_s: float) -> PartitionSearch:
    search = PartitionSearch(table, pp=req.pp, vpp=req.vpp, placement=req.placement,
                             memory_limit_bytes=req.memory_limit_bytes,
                             old_layer_ranks=layer_ranks(old.bounds(), old.ranks()), penalty_s=penalty_s)
    orders = _orders(old, fresh)
    starts = {tuple(map(tuple, old.bounds())), tuple(map(tuple, fresh.bounds()))}
    for label, order in orders.items():
        search.add_schedule(label, parse_schedule(order))
        for start in sorted(starts):
            search.descend(label, start)
    return search


def _orders(old: Plan, fresh: Plan) -> dict[str, dict[str, list[str]]]:
    """Schedule orders to search under, by label: the old plan's and the front door's."""
    orders = {"old:" + str(old.solver.schedule or "plan"): old.schedule}
    if fresh.schedule != old.schedule:
        orders[str(fresh.solver.schedule or "new")] = fresh.schedule
    return orders


def _choose(search: PartitionSearch, table, req: PlanRequest, old: Plan, fresh: Plan) -> tuple[Candidate, Plan]:
    """The penalised best as a validated Plan; the front door's plan when it fails validation."""
    label_order = _orders(old, fresh)
    for cand in sorted(search.seen.values(), key=lambda c: (c.score, c.moved_layers, c.schedule, c.bounds)):
        if cand.score == math.inf:
            break
        order = label_order[cand.schedule]
        if list(cand.bounds) == fresh.bounds() and order == fresh.schedule:
            return cand, fresh
        ev = evaluate(table, req, [tuple(b) for b in cand.bounds], parse_schedule(order))
        if not ev.violations:
            return cand, _plan_from(fresh, ev, cand, req)
    raise InputError("replan", "no candidate partition is valid under the new routing")


def _activation_limit(req: PlanRequest, sc: StageCosts) -> list[int] | None:
    """The request's activation budget per rank for the lower bound (None: no limit)."""
    limit = memory_limit_of(req)
    return None if limit is None else limit.activation_limit(sc)


def _plan_from(base: Plan, ev, cand: Candidate, req: PlanRequest) -> Plan:
    """``base`` (the front door's plan) with another partition/order re-timed in."""
    sc: StageCosts = ev.costs
    plan = replace(base, stages=partition_stages(ev.bounds, ev.ranks), schedule=format_schedule(ev.schedule),
                   stage_costs=stage_costs_to_dict(sc), extra=dict(base.extra))
    sim = ev.sim
    plan.predicted = replace(base.predicted, step_time_s=sim.step_time, bubble_fraction=sim.bubble_fraction,
                             mfu=plan_mfu(plan, sim.step_time), peak_memory_bytes=sim.peak_memory_bytes,
                             **bound_record(sc, req.microbatches, _activation_limit(req, sc)),
                             steady_step_time_s=ev.steady.period_s, steady_bubble_fraction=ev.steady.bubble_fraction,
                             busy_s=sim.busy, critical_path=sim.critical_path_text()[:64])
    name = cand.schedule.removeprefix("old:")
    plan.baselines = {**base.baselines, "plan": Baseline.from_dict(
        {"step_time_s": sim.step_time, "stages": [list(b) for b in ev.bounds], "schedule": name})}
    plan.solver = replace(base.solver, name=f"replan-search+{name}", schedule=name, status="FEASIBLE")
    return plan


def _decide(old_step: float, new_step: float, min_gain: float, problem: str, same: bool) -> tuple[bool, str]:
    gain = (old_step - new_step) / old_step
    if same:
        return False, "the current plan is still the best choice under the new routing"
    if problem:
        return True, f"the current plan no longer fits under the new routing: {problem}"
    if gain >= min_gain:
        return True, f"gain {gain:.1%} reaches --min-gain {min_gain:.1%}"
    return False, f"gain {gain:.1%} is below --min-gain {min_gain:.1%}"


def _layer_drift(spec, before: RoutingSummary | None, now: RoutingSummary) -> tuple[LayerDrift, ...]:
    out = []
    for idx in sorted(now.imbalance):
        out.append(LayerDrift(
            layer=idx, type=spec.layers[idx].type_key,
            then_imbalance=before.imbalance.get(idx, 1.0) if before else 1.0,
            now_imbalance=now.imbalance[idx],
            then_max_vio=before.max_vio.get(idx, 0.0) if before else 0.0,
            now_max_vio=now.max_vio[idx]))
    return tuple(out)


def _stage_drift(bounds, ranks, then: StageCosts, now: StageCosts) -> tuple[StageDrift, ...]:
    return tuple(StageDrift(stage=s, rank=r, layers=(a, b), then_s=then.f[s] + then.i[s] + then.w[s],
                            now_s=now.f[s] + now.i[s] + now.w[s])
                 for s, ((a, b), r) in enumerate(zip(bounds, ranks)))


def _replan_section(r: ReplanResult, old: Plan, min_gain: float, move_penalty: float, fresh: Plan,
                    fresh_moved: int) -> dict:
    m = r.migration
    return {
        "old_step_time_s": r.old_step_s, "new_step_time_s": r.new_step_s, "gain": r.gain,
        "moved_layers": m.to_dict(), "migration_bytes": m.total_bytes, "migration_s": m.seconds,
        "break_even_steps": m.break_even_steps(r.old_step_s, r.new_step_s),
        "recommended": r.recommended, "reason": r.reason,
        "then_step_time_s": r.then_step_s, "old_predicted_step_time_s": old.predicted.step_time_s,
        "old_fits_memory": not r.old_problem, "best_step_time_s": r.best_step_s,
        "gap_recovered": r.gap_recovered, "min_gain": min_gain, "move_penalty": move_penalty,
        "old_stages": [list(b) for b in old.bounds()],
        "stage_slowdown": [{"stage": s.stage, "then_s": s.then_s, "now_s": s.now_s, "slowdown": s.slowdown}
                           for s in r.stages],
        "front_door": {"step_time_s": fresh.predicted.step_time_s,
                       "stages": [list(b) for b in fresh.bounds()], "moved_layers": fresh_moved},
    }
