"""``ppplan plan --layout``: the user's own partition planned beside ppplan's free plan.

The layout (a Megatron ``--pipeline-model-parallel-layout`` string or decoder counts per stage,
read by ``planner.core.layout_text``) pins every stage boundary (``StagePins.stages``); the
planner still chooses the schedule, W placement, the recomputation mode and, with
``--microbatches auto``, the count around it. Two plans are made with the same request and
work budget, one free and one pinned: the free plan is the one ``ppplan plan`` makes without
``--layout`` (it is not changed), the pinned one becomes the ``user_layout`` baseline. With
``--keep-layout`` the pinned plan is the one written and the free plan its ``ppplan`` baseline.
A layout that fits no schedule within memory is planned again without the memory limit, so its
baseline still has a step time, with ``fits_memory`` false.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from planner.core.cluster import ClusterSpec, default_cluster_path, load_cluster
from planner.core.errors import BudgetExhausted, InfeasibleError, InputError
from planner.core.layout_text import layout_bounds, layout_stages
from planner.core.model import ModelSpec
from planner.core.plan import Baseline, Plan
from planner.planning.records import PlanRequest
from solvers.partition.pins import StagePins

__all__ = ["UserLayout", "read_user_layout", "plan_with_layout", "USER_LAYOUT", "FREE_PLAN"]

USER_LAYOUT = "user_layout"
"""Baseline name of the user's layout."""
FREE_PLAN = "ppplan"
"""Baseline name of ppplan's free plan in a ``--keep-layout`` plan."""


@dataclass(frozen=True, kw_only=True)
class UserLayout:
    """The user's layout, read and checked against the model."""

    text: str
    """As given to ``--layout``."""
    pp: int
    """Pipeline ranks (``--pp``, or derived: ``read_user_layout``)."""
    vpp: int
    """Virtual stages per rank: stages / pp."""
    stages: tuple[tuple[int, int], ...]
    """Layer range of each stage, in Megatron's stage order (stage i on rank i % pp)."""


def read_user_layout(text: str, model: ModelSpec, *, pp: int | None, vpp: int | None,
                     cluster: str | Path | ClusterSpec | None, conflicts: dict[str, object]) -> UserLayout:
    """``text`` checked against ``model``; pp and vpp from ``--pp``/``--vpp`` or else from the stage
    count: the pp of ``cluster`` (or the model's shipped one) when it divides the stages
    (Megatron's own rule, vpp = stages / pp). ``conflicts`` maps options that cannot go with
    ``--layout`` to their values."""
    given = [name for name, value in conflicts.items() if value is not None]
    if given:
        raise InputError("--layout", f"given together with {given[0]}", f"the layout pins every stage: drop {given[0]}")
    letters = layout_stages(text, model.layout)
    pp, vpp = _degrees(len(letters), pp, vpp, None if pp is not None or vpp is not None else _cluster_pp(model, cluster))
    return UserLayout(text=text, pp=pp, vpp=vpp, stages=tuple(layout_bounds(letters, pp)))


def _cluster_pp(model: ModelSpec, cluster: str | Path | ClusterSpec | None) -> int | None:
    """Pipeline ranks of the cluster given (or the model's shipped one); None when there is none."""
    if isinstance(cluster, ClusterSpec):
        return cluster.parallel.pp
    path = cluster if cluster is not None else default_cluster_path(model.name)
    return None if path is None else load_cluster(path).parallel.pp


def _degrees(stages: int, pp: int | None, vpp: int | None, cluster_pp: int | None) -> tuple[int, int]:
    """(pp, vpp) with pp x vpp = ``stages`` (see ``read_user_layout``)."""
    if pp is not None and vpp is not None:
        if pp * vpp != stages:
            raise InputError("--layout", f"{stages} stages, but --pp {pp} x --vpp {vpp} = {pp * vpp}",
                             "give pp x vpp stages, or drop --vpp")
        return pp, vpp
    if pp is not None or vpp is not None:
        known, flag = (pp, "--pp") if pp is not None else (vpp, "--vpp")
        if stages % known:
            raise InputError("--layout", f"{stages} stages is not a multiple of {flag} {known}",
                             "give pp x vpp stages")
        return (pp, stages // pp) if pp is not None else (stages // vpp, vpp)
    if cluster_pp is None or stages % cluster_pp:
        found = "no cluster pp" if cluster_pp is None else f"not a multiple of the cluster's pp {cluster_pp}"
        raise InputError("--layout", f"{stages} stages, {found}", "pass --pp (and --vpp): stages = pp x vpp")
    return cluster_pp, stages // cluster_pp


def plan_with_layout(run: Callable[[PlanRequest], Plan], req: PlanRequest, user: UserLayout, *,
                     keep: bool) -> Plan:
    """The free plan with the user's as its ``user_layout`` baseline, or (``keep``) the user's
    plan with the free one as its ``ppplan`` baseline; ``run`` plans one request (module doc)."""
    pinned = replace(req, pins=StagePins(stages=user.stages))
    if keep:
        mine = run(pinned)  # over memory or refused: the one-line reason, as for any plan
        try:
            free = _baseline(run(req), mine)
        except InfeasibleError as exc:
            free = Baseline(step_time_s=None, status=_why(exc))
        mine.baselines = {USER_LAYOUT: _baseline(mine, mine, layout=user.text), FREE_PLAN: free,
                          "plan": mine.baselines["plan"]}
        return mine
    free = run(req)
    free.baselines = {**free.baselines, USER_LAYOUT: _user_baseline(run, pinned, free, user.text)}
    return free


def _user_baseline(run: Callable[[PlanRequest], Plan], pinned: PlanRequest, free: Plan, text: str) -> Baseline:
    """The pinned plan as a baseline; over memory, its plan without the memory limit (fits false)."""
    try:
        return _baseline(run(pinned), free, layout=text)
    except BudgetExhausted as exc:
        return Baseline(step_time_s=None, status=_why(exc), layout=text)
    except InfeasibleError as exc:
        unlimited = replace(pinned, memory_limit_bytes=None, memory_limit_microbatches=None)
        try:
            return _baseline(run(unlimited), free, layout=text, fits=False)
        except InfeasibleError:
            return Baseline(step_time_s=None, status=_why(exc), layout=text, fits_memory=False)


def _baseline(plan: Plan, against: Plan, *, layout: str | None = None, fits: bool = True) -> Baseline:
    """``plan``'s figures as a baseline of ``against``."""
    pred, step = plan.predicted, against.predicted.step_time_s
    return Baseline(step_time_s=pred.step_time_s, stages=[list(b) for b in plan.bounds()],
                    schedule=plan.solver.schedule, microbatches=plan.num_microbatches,
                    peak_memory_bytes=pred.peak_memory_bytes, fits_memory=fits,
                    plan_speedup=pred.step_time_s / step if step else None, bubble_fraction=pred.bubble_fraction,
                    recompute=plan.cluster.settings.recompute, layout=layout)


def _why(exc: Exception) -> str:
    """A failed plan's reason as a baseline status (one line)."""
    return f"infeasible: {str(exc).splitlines()[0]}"
