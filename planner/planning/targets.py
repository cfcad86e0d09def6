"""Planning for a ``--target``: the search enumerates only what that framework executes.

The target's capability table (``planner.core.targets``) becomes, per request:

- a check of the shape (placement, virtual stages, pipeline ranks, MTP, recomputation)
  that fails in one line naming the ``--target`` or option that fixes it;
- for a framework without F&B overlap, pair costs equal to serial costs (the cost
  table's ``pairs`` emptied): no fused candidate exists and the overlap partition
  balances on the cost the framework will see;
- for a framework that runs only fixed schedules (Megatron, DeepSpeed), one planning run
  per family it runs, with that family named (its order as drawn: no W moved, no greedy
  or CP-SAT order), each with the recomputation modes that family runs with; the
  fastest plan wins (ties: the earlier family);
- a final check that the chosen plan exports to the target's format (a plan made for X
  always exports to X); a run whose plan the exporter refuses is dropped with its reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from planner.core.costs import CostTable
from planner.core.errors import InfeasibleError, InputError
from planner.core.plan import Plan
from planner.core.op_sac import OP, WHOLE_BACKWARD_FAMILIES
from planner.core.schedule import format_schedule, whole_backward
from planner.core.recompute import is_module_set
from planner.core.targets import Target
from planner.planning import make_plan
from planner.planning.records import PlanRequest
from solvers.schedule.families.registry import SCHEDULES, applies, candidate_schedules

__all__ = ["TargetRun", "check_shape", "target_runs", "plan_for_target"]

ModeTables = Sequence[tuple[str, CostTable]]


@dataclass(frozen=True, kw_only=True)
class TargetRun:
    """One planning run for a target: a schedule option and the recomputation modes."""

    schedule: str
    """``--schedule`` value for the run (a family name, or the user's choice)."""
    modes: tuple[str, ...]
    """Recomputation modes planned with."""


def check_shape(target: Target, *, pp: int, vpp: int, placement: str, schedule: str,
                layout: str, modes: Sequence[str], user_recompute: str) -> None:
    """``InputError`` when the request asks for something the target does not run."""
    fix = "or re-plan with --target torch, which runs it"
    if pp < target.min_pp:
        raise InputError("--pp", f"{target.name} builds no pipeline stages with pp {pp}",
                         f"use --pp {target.min_pp} or more, {fix}")
    if target.max_vpp is not None and vpp > target.max_vpp:
        raise InputError("--vpp", f"{target.name} holds at most {target.max_vpp} stage per rank, got vpp {vpp}",
                         f"use --vpp {target.max_vpp}, {fix}")
    if vpp > 1 and placement not in target.placements:
        raise InputError("--placement", f"{target.name} builds only {'/'.join(target.placements)} placement",
                         f"use --placement {target.placements[0]}, {fix}")
    if target.mtp == "none" and "m" in layout:
        raise InputError("--target", f"{target.name}'s models have no MTP module and this model has "
                         f"{layout.count('m')} MTP layer(s)", "use --target megatron or --target torch")
    if schedule not in ("auto", "cpsat"):
        kind = SCHEDULES.get(schedule)
        if target.families is not None and schedule not in target.families:
            raise InputError("--schedule", f"{target.name} does not run {schedule}",
                             f"use one of {', '.join(target.families)} or auto, {fix}")
        if kind is not None and kind.fused and not target.fused_pairs:
            raise InputError("--schedule", f"{schedule} fuses F&B pairs, which {target.name} cannot overlap",
                             f"use a family without fused pairs or auto, {fix}")
    elif schedule == "cpsat" and not target.any_order:
        raise InputError("--schedule", f"{target.name} takes no explicit order, so a CP-SAT order cannot run",
                         f"use --schedule auto, {fix}")
    if is_module_set(user_recompute) and not target.module_sets:
        raise InputError("--recompute-modules", f"{target.name} recomputes no module list "
                         f"(it has {', '.join(target.recompute)})",
                         f"use --target megatron, which runs Megatron's --recompute-modules, or --recompute "
                         f"{target.recompute[-1]}")
    if user_recompute == "selective" and OP in target.recompute and not target.runs_recompute(user_recompute):
        raise InputError("--recompute", f"{target.name}'s SelectiveAC is its per-op policy (every second matmul's "
                         "output kept), not the attention-core recomputation selective costs",
                         f"use --recompute {OP} (GQA with a dense MLP), full or none, {fix}")
    if user_recompute != "auto" and not target.runs_recompute(user_recompute):
        raise InputError("--recompute", f"{target.name} has no {user_recompute} recomputation "
                         f"(it has {', '.join(target.recompute)})",
                         f"use --recompute {target.recompute[-1]} or auto, {fix}")
    if not any(target.runs_recompute(m) for m in modes):
        raise InputError("--recompute", f"{target.name} runs none of {', '.join(modes)}", fix)


def target_runs(target: Target, table: CostTable, *, schedule: str, pp: int, vpp: int, ep: int,
                placement: str, modes: Sequence[str]) -> list[TargetRun]:
    """The planning runs the target's menu asks for (see the module docstring)."""
    modes = tuple(m for m in modes if target.runs_recompute(m))
    if OP in modes:
        return _whole_backward_runs(schedule=schedule, vpp=vpp, placement=placement)
    if target.families is None:
        return [TargetRun(schedule=schedule, modes=modes)]
    names = [schedule] if schedule not in ("auto", "cpsat") else \
        [n for n in candidate_schedules("auto", table, vpp=vpp, placement=placement) if n in target.families]
    runs = []
    for name in names:
        run_modes = modes
        if SCHEDULES[name].fused:
            blocker = _fused_blocker(target, pp=pp, vpp=vpp, ep=ep)
            if blocker is not None and name == schedule:
                raise InputError("--schedule", f"{name} fuses F&B pairs, which {target.name} runs {blocker}",
                                 "use --vpp 2 or more and --ep 2 or more, or re-plan with --target torch")
            if blocker is not None:
                continue
            run_modes = tuple(m for m in modes if target.runs_recompute(m, fused=True))
        if run_modes:
            runs.append(TargetRun(schedule=name, modes=run_modes))
    if not runs:
        raise InputError("--target", f"{target.name} runs no schedule for pp {pp} vpp {vpp} "
                         f"placement {placement}", "change --vpp/--placement or use --target torch")
    return runs


def _whole_backward_runs(*, schedule: str, vpp: int, placement: str) -> list[TargetRun]:
    """``op`` runs each backward whole (``planner.core.op_sac.WHOLE_BACKWARD_FAMILIES``): one
    run per such family that fits the shape, its order as drawn (W right after I)."""
    if schedule not in ("auto", "cpsat"):
        if schedule not in WHOLE_BACKWARD_FAMILIES:
            raise InputError("--schedule", f"{schedule} splits or moves the weight gradient, and recompute op "
                             "(torch's selective checkpointing) runs each backward once, whole",
                             f"use --schedule {' or '.join(WHOLE_BACKWARD_FAMILIES)}, or another --recompute")
        return [TargetRun(schedule=schedule, modes=(OP,))]
    names = [n for n in WHOLE_BACKWARD_FAMILIES if applies(SCHEDULES[n], vpp, placement)]
    if not names:
        raise InputError("--recompute", f"op runs each backward whole, in {', '.join(WHOLE_BACKWARD_FAMILIES)}, "
                         f"none of which runs vpp {vpp} with placement {placement}",
                         "use --placement loop, or another --recompute")
    return [TargetRun(schedule=n, modes=(OP,)) for n in names]


def _fused_blocker(target: Target, *, pp: int, vpp: int, ep: int) -> str | None:
    """Why the target cannot run fused pairs at this shape (None when it can)."""
    if target.fused_needs_vpp and pp > 1 and vpp == 1:
        return "only with virtual stages when pp > 1"
    if target.fused_needs_ep and ep < 2:
        return "only with expert parallelism (ep > 1)"
    return None


def _without_pairs(table: CostTable) -> CostTable:
    """[Note: no-overlap target] Pair costs equal serial costs: no pair is cheaper fused."""
    return replace(table, pairs={})


def plan_for_target(target: Target, tables: ModeTables, req: PlanRequest,
                    request_for: Callable[[str, CostTable], PlanRequest]) -> Plan:
    """Plan for ``target``: the fastest plan over its runs that its exporter accepts.

    ``tables`` are (recompute mode, cost table) pairs; ``request_for(mode, table)`` is
    ``req`` with that mode's plan sections.
    """
    if not target.fused_pairs:
        tables = [(mode, _without_pairs(t)) for mode, t in tables]
    runs = target_runs(target, tables[0][1], schedule=req.schedule, pp=req.pp, vpp=req.vpp,
                       ep=int(req.parallel.get("ep", 1)), placement=req.placement,
                       modes=[mode for mode, _ in tables])
    best: Plan | None = None
    record, errors = [], []
    for run in runs:
        chosen = [(m, t) for m, t in tables if m in run.modes]
        first, *rest = [(t, replace(request_for(m, t), schedule=run.schedule)) for m, t in chosen]
        try:
            plan = make_plan(first[0], first[1], variants=rest)
            if plan.cluster.settings.recompute == OP:
                plan = _with_whole_backward(plan)
            _check_exports(target, plan)
        except InfeasibleError as exc:
            record.append({"schedule": run.schedule, "recompute": list(run.modes), "status": str(exc)})
            errors.append(exc)
            continue
        record.append({"schedule": run.schedule, "recompute": list(run.modes),
                       "step_time_s": plan.predicted.step_time_s, "status": "valid"})
        if best is None or plan.predicted.step_time_s < best.predicted.step_time_s * (1 - 1e-12):
            best = plan
    if best is None:
        if len(runs) == 1:
            raise errors[0]  # one run (torch, torchtitan): the search's own reason, unchanged
        raise InfeasibleError(f"no plan {target.name} runs fits: {errors[0]}")
    best.extra["target"] = target.name
    if target.families is not None:
        best.solver = replace(best.solver, target_runs=record)
    return best


def _with_whole_backward(plan: Plan) -> Plan:
    """``plan`` with each I and the W right after it written as one B (what ``op`` runs; the
    step is the same, B lasting I + W)."""
    whole = whole_backward(plan.parsed_schedule())
    if whole is None:  # the families of _whole_backward_runs keep W after I
        raise InfeasibleError("recompute op needs each W right after its I; this order moves one")
    return replace(plan, schedule=format_schedule(whole))


def _check_exports(target: Target, plan: Plan) -> None:
    """``InfeasibleError`` (the exporter's line) when the target's format refuses ``plan``."""
    if target.name == "torch":
        return
    from planner.export import export_plan
    from planner.export.schedule import ExportError

    try:
        export_plan(plan, target.export_format)
    except ExportError as exc:
        raise InfeasibleError(f"{target.name} cannot run the plan: {exc}") from None
