"""What ``replan`` rebuilds from a saved plan: model, cluster, request, and its routing.

A plan JSON records the model name, the cluster (``gpu``, ``num_gpus``,
``gpus_per_node``, ``training``), the parallel degrees, the microbatches, the memory
limit and the solver's choices; together they give back the ``ClusterSpec`` and the
``PlanRequest`` the plan was made with. The routing the plan's costs assumed is the
``routing`` section a previous ``ppplan replan`` wrote, or balanced (factor 1 on
every layer, what ``ppplan plan`` assumes) when there is none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from planner.core.plan_sections import cluster_section, model_section
from planner.core.cluster import ClusterSpec, cluster_from_dict
from planner.core.costs import CostTable
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.model import ModelSpec
from planner.core.plan import Plan
from planner.planning import PlanRequest
from solvers.schedule.search.budget import DEFAULT_WORK
from planner.replanning.megatron_layout import megatron_layout
from profiler.routing import RoutingSummary, load_routing, routing_format
from solvers.schedule.search.search import SCHEDULES, candidate_schedules

__all__ = ["plan_model", "plan_cluster", "plan_request", "requested_schedule", "plan_routing",
           "read_traces", "routing_section"]


def plan_model(plan: Plan, model: str | None = None) -> ModelSpec:
    """The plan's model (``model`` overrides the recorded name: an id or a config path)."""
    name = model or plan.model.name
    if not isinstance(name, str) or not name:
        raise InputError("plan.model.name", "missing", "pass --model ID_OR_CONFIG")
    spec = load_model(name)
    layout = spec.layout
    recorded = plan.model.layout
    if spec.num_layers != int(plan.model.num_layers) or (recorded is not None and recorded != layout):
        raise InputError("plan.model", f"{spec.name} has {spec.num_layers} layers ({layout}), the plan "
                         f"{plan.model.num_layers} ({recorded or '?'})",
                         "pass --model with the config the plan was made for")
    return spec


def plan_cluster(plan: Plan) -> ClusterSpec:
    """``ClusterSpec`` from the plan's ``cluster`` and ``parallel`` sections."""
    c, p = plan.cluster.to_dict(), plan.parallel
    if "gpu" not in c or "training" not in c:
        raise InputError("plan.cluster", "needs gpu, num_gpus, training",
                         "re-plan from a plan written by ppplan plan")
    parallel = {k: getattr(p, k) for k in ("pp", "vpp", "tp", "ep", "dp", "cp", "etp") if getattr(p, k) is not None}
    data = {"gpu": c["gpu"], "num_gpus": c.get("num_gpus"), "gpus_per_node": c.get("gpus_per_node", 8),
            "parallel": parallel, "training": c["training"], **({"network": c["network"]} if "network" in c else {})}
    return cluster_from_dict(data, where="plan.cluster")


def plan_request(plan: Plan, model: ModelSpec, cluster: ClusterSpec, table: CostTable) -> PlanRequest:
    """The request that re-plans ``plan``'s job on ``table`` (same shape, limits and choices)."""
    solver, par = plan.solver, cluster.parallel
    placement = plan.parallel.placement_style
    schedule = requested_schedule(plan, table, vpp=par.vpp, placement=placement)
    return PlanRequest(
        pp=par.pp, vpp=par.vpp, microbatches=plan.num_microbatches,
        microbatch_size=int(plan.microbatches.size),
        memory_limit_bytes=plan.memory_limit_bytes, schedule=schedule,
        partition=solver.partition or "overlap", placement=placement,
        seed=int(solver.seed or 0), model=model_section(model, table),
        cluster=cluster_section(cluster), parallel={"tp": par.tp, "ep": par.ep, "dp": par.dp},
        peak_flops=cluster.gpu.peak_flops, num_gpus=cluster.num_gpus,
        work_s=float((solver.budget or {}).get("work") or DEFAULT_WORK))


def requested_schedule(plan: Plan, table: CostTable, *, vpp: int, placement: str) -> str:
    """The ``--schedule`` family ``plan`` was made with, or ``auto``.

    The chosen name may carry passes (``1f1b+w-fill``, ``cpsat-lns(...)``), so the family
    is read from the screened candidates (``solver.candidates`` without a ``phase``): one
    family where ``auto`` would have screened several means that family was asked for.
    """
    screened = {c.get("schedule") for c in plan.solver.candidates or []
                if isinstance(c, dict) and "phase" not in c}
    if len(screened) != 1:
        return "auto"
    (name,) = screened
    auto = candidate_schedules("auto", table, vpp=vpp, placement=placement)
    return name if name in SCHEDULES and auto != [name] else "auto"


def plan_routing(plan: Plan, model: ModelSpec) -> RoutingSummary | None:
    """The routing the plan's costs assumed (its ``routing`` section), None for balanced."""
    raw = plan.extra.get("routing")
    if raw is None:
        return None
    where = "plan.routing"
    if not isinstance(raw, dict):
        raise InputError(where, "expected an object")
    imb = _layer_map(raw.get("imbalance"), model, f"{where}.imbalance", minimum=1.0)
    vio = _layer_map(raw.get("max_vio", {}), model, f"{where}.max_vio", minimum=0.0)
    its = raw.get("iterations", [0, 0])
    if not (isinstance(its, list) and len(its) == 2 and all(isinstance(i, int) for i in its)):
        raise InputError(f"{where}.iterations", f"expected [first, last], got {its!r}")
    return RoutingSummary(tokens_per_expert={}, imbalance=imb, max_vio=vio, iterations=(its[0], its[1]))


def _layer_map(raw: Any, model: ModelSpec, where: str, *, minimum: float) -> dict[int, float]:
    if not isinstance(raw, dict):
        raise InputError(where, "expected an object of layer index -> value")
    out = {}
    for key, value in raw.items():
        if not key.isdigit() or not int(key) < model.num_layers or not model.layers[int(key)].is_moe:
            raise InputError(f"{where}.{key}", f"is not an MoE layer index of {model.name}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise InputError(f"{where}.{key}", f"expected a number >= {minimum}, got {value!r}")
        out[int(key)] = float(value)
    return out


def read_traces(plan: Plan, model: ModelSpec, paths: list[str | Path], *, fmt: str = "auto",
                window: int | None = None, tp_pp_dp_mapping: bool = False,
                expert_tp: int | None = None) -> RoutingSummary:
    """Routing traces of ``plan``'s job; Megatron's per-rank logs are read against its layout."""
    ep = plan_cluster(plan).parallel.ep
    layout = None
    if routing_format(paths, fmt) == "megatron":
        layout = megatron_layout(plan, model, tp_pp_dp_mapping=tp_pp_dp_mapping, expert_tp=expert_tp)
    elif expert_tp is not None:
        raise InputError("--expert-tensor-parallel-size", "is read only with Megatron's per-rank logs "
                         "(these traces use global expert numbering)", "leave it out for these traces")
    return load_routing(paths, model, ep=ep, window=window, fmt=fmt, layout=layout)


def routing_section(summary: RoutingSummary, paths: list[str | Path], window: int | None, *,
                    fmt: str = "auto") -> dict:
    """The ``routing`` section a re-planned plan carries (read back by ``plan_routing``)."""
    return {"traces": [str(p) for p in paths], "format": routing_format(paths, fmt), "window": window,
            "iterations": list(summary.iterations),
            "imbalance": {str(k): v for k, v in sorted(summary.imbalance.items())},
            "max_vio": {str(k): v for k, v in sorted(summary.max_vio.items())}}
