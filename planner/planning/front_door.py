"""``plan(...)``: the front door ``ppplan plan`` and the Python API (``planner.api.plan``) call.

It reads the options (``planner.options``), resolves the cluster
(``planner.core.cluster_resolve``), takes the cost tables (``planner.planning.cost_tables``)
and routes the request: a profile alone (``planner.planning.byo_costs``), a GPU count
(``planner.planning.degree_plans``), device orders or offloading modes to choose between
(``planner.planning.choice``), the user's layout (``planner.planning.user_layout``), several
sites (``planner.planning.sites``), else one plan for the target (``planner.planning.targets``);
every plan it returns has been delivered ([Note: delivered plans] in ``planner.planning.delivery``).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.core.cluster import ClusterSpec, default_cluster_path
from planner.core.cluster_resolve import (batch_for_microbatches, command_line_cluster, resolve_cluster, vpp_error,
                                          with_offload)
from planner.core.devices import DEVICE_ORDERS
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.limits import check_stage_microbatches
from planner.core.offload import CHOICE_SEP, offload_choices
from planner.core.plan import Plan
from planner.core.plan_sections import cluster_section, model_section
from planner.core.sites import with_site_hop
from planner.core.targets import get_target
from planner.export import LaunchPlan
from planner.options import DEFAULT_MODEL, PlanOptions, plan_options, recompute_mode
from planner.planning import PlanRequest
from planner.planning.cost_tables import plan_costs
from planner.planning.delivery import deliver
from planner.planning.dp_step import add_dp_step
from planner.planning.fleet import fleet_request, plan_device_orders
from planner.planning.request_options import deadlines_for, memory_options, microbatch_count
from planner.planning.targets import check_shape, plan_for_target
from solvers.partition.pins import StagePins
from solvers.partition.search import METHODS
from solvers.schedule.search.budget import check_time_limit, check_work
from solvers.schedule.search.search import check_objective, check_schedule_option

__all__ = ["plan"]

def plan(model: str | None = None, cluster: str | Path | ClusterSpec | None = None,
         options: PlanOptions | None = None, **overrides: Any) -> LaunchPlan:
    """Plan ``model`` (a shipped id or config path; default ``DEFAULT_MODEL``) on ``cluster``
    (a cluster file or ``ClusterSpec``; default the model's shipped one).

    ``options`` (``planner.options.PlanOptions``, the record ``ppplan plan`` builds from its
    flags) with keyword ``overrides`` by field name on top; an unknown name is an
    ``InputError`` naming it. With ``profile``, measured costs replace the analytical model.
    ``microbatches="auto"`` tries every count dividing the per-replica batch;
    ``first_stage_layers``/``last_stage_layers`` pin the decoder layers of the first/last
    stage (Megatron's ``--decoder-first/last-pipeline-num-layers``); ``layout`` pins every stage
    (``planner.planning.user_layout``: the free plan with the user's as a baseline, or with
    ``keep_layout`` the user's). ``target``
    (``planner.core.targets``) limits the search to what that framework executes; the plan
    records it. ``work`` is the search effort in reference seconds (deterministic: the same
    plan at any machine load); ``time_limit`` an optional wall-clock cap on top ([Note: work
    budget] and [Note: kept budget] in ``solvers.schedule.search.budget``). Every plan returned has
    read back and validated ([Note: delivered plans] in ``planner.planning.delivery``) and is
    a ``planner.export.LaunchPlan``, the type ``planner.plan`` (this function) returns.
    """
    o = plan_options(options, overrides)
    if o.devices_order != "given":
        return _device_orders(model, cluster, o)
    pp, vpp, tp, ep, dp, gpus, gpu = o.pp, o.vpp, o.tp, o.ep, o.dp, o.gpus, o.gpu
    global_batch, seq_len, recompute, microbatches = o.global_batch, o.seq_len, recompute_mode(o), o.microbatches
    partition, schedule, placement, target, profile = o.partition, o.schedule, o.placement, o.target, o.profile
    first_stage_layers, last_stage_layers, deadline, objective = (o.first_stage_layers, o.last_stage_layers,
                                                                  o.deadline, o.objective)
    seed = o.seed
    sites = {k: v for k, v in dict(count=o.sites, inter_site_gbps=o.inter_site_gbps,
                                   inter_site_latency_ms=o.inter_site_latency_ms).items() if v is not None}
    if sites and o.devices is not None:
        raise InputError("--sites", "given together with --devices (a mixed fleet over several sites is not modelled)",
                         "plan the fleet on one site, or the sites with one GPU type")
    work = check_work(o.work)  # the one check of --work and --time-limit
    time_limit = None if o.time_limit is None else check_time_limit(o.time_limit)
    check_objective(objective)
    started = time.perf_counter()  # the wall cap covers cost tables and every search
    tgt = get_target(target)
    limit_bytes, limit_mb = memory_options(o.memory_gib, o.memory_limit)
    if o.keep_layout and o.layout is None:
        raise InputError("--keep-layout", "needs --layout", "pass --layout LAYOUT or drop --keep-layout")
    if model is None and profile is not None:  # bring your own costs
        from planner.planning.byo_costs import check_without_model, plan_from_profile

        check_without_model(layout=o.layout, devices=o.devices, sites=sites, target=tgt.name)
        check_schedule_option(schedule, vpp=vpp or 1, placement=placement)
        return deliver(plan_from_profile(profile, pp=pp, vpp=vpp, microbatches=microbatches,
                                         memory_limit_bytes=limit_bytes, memory_limit_microbatches=limit_mb,
                                         schedule=schedule, partition=partition, placement=placement, seed=seed,
                                         work=work, time_limit=time_limit, started=started, objective=objective,
                                         deadlines=deadlines_for(deadline, pp * (vpp or 1) if pp else 0,
                                                                 microbatches)),
                       deadlines=deadline)
    spec = load_model(model or DEFAULT_MODEL)
    if cluster is None and gpus is not None and default_cluster_path(spec.name) is None:
        cluster = command_line_cluster(gpus, gpu=gpu, global_batch=global_batch, seq_len=seq_len)
    user = None
    if o.layout is not None:  # the user's partition: it fixes pp x vpp (planner.planning.user_layout)
        from planner.planning.user_layout import read_user_layout

        user = read_user_layout(o.layout, spec, pp=pp, vpp=vpp, cluster=cluster, conflicts={
            "--gpus": gpus, "--first-stage-layers": first_stage_layers, "--last-stage-layers": last_stage_layers})
        pp, vpp = user.pp, user.vpp
    if gpus is not None and o.devices is not None:
        raise InputError("--devices", "given together with --gpus", "pass the fleet with --devices and its "
                         "degrees with --pp/--tp/--dp, or a GPU count with --gpus")
    if gpus is not None and o.offload not in (None, (), []):  # the CLI passes () when --offload is absent
        raise InputError("--offload", "given with --gpus (the degree search plans the cluster file's offloading)",
                         "set training.offload in the cluster file, or give the degrees")
    if gpus is not None:  # choose tp/pp/vpp/ep/cp/dp/micro-batch for gpus GPUs first
        from planner.planning.degree_plans import plan_for_gpus

        base = resolve_cluster(spec, cluster, global_batch=global_batch, seq_len=seq_len,
                               recompute=recompute, gpu=gpu, target=tgt.name, sites=sites)
        rest = {k: getattr(o, k) for k in _PER_DEGREE}
        return deliver(plan_for_gpus(plan, model or DEFAULT_MODEL, spec, base, gpus, work=work,
                                     time_limit=time_limit, started=started, options=rest), deadlines=deadline)
    try:
        cl = resolve_cluster(spec, cluster, pp=pp, vpp=vpp, tp=tp, ep=ep, dp=dp,
                             global_batch=global_batch, seq_len=seq_len, recompute=recompute, gpu=gpu,
                             target=tgt.name, devices=o.devices, sites=sites)
    except InputError as exc:
        if exc.field == "parallel.pp" and vpp is not None and vpp > 1:
            vpp_error(spec, pp or resolve_cluster(spec, cluster, tp=tp, ep=ep, dp=dp).parallel.pp, vpp)
        raise
    cl = batch_for_microbatches(cl, microbatches)
    cl = with_offload(spec, cl, o.offload, tgt.offload, tgt.name)
    if CHOICE_SEP in cl.training.offload:  # a choice: plan with each mode, keep the fastest that fits
        from planner.planning.choice import plan_offload_choices

        return plan_offload_choices(lambda mode: plan(model, cluster, replace(o, offload=mode)),
                                    offload_choices(cl.training.offload), o.objective)
    if cl.training.moe_expert_capacity_factor is not None and not tgt.moe_capacity:
        raise InputError("training.moe_expert_capacity_factor", f"--target {tgt.name} does not run Megatron's "
                         "MoE capacity mode", "use --target megatron or torch, or leave the field out (dropless)")
    if cl.parallel.cp > 1 and cl.training.cp_comm_type not in tgt.cp_comm_types:
        raise InputError("training.cp_comm_type", f"--target {tgt.name} does not run {cl.training.cp_comm_type!r}",
                         f"use one of {', '.join(tgt.cp_comm_types)}, or another --target")
    tables = plan_costs(spec, cl, profile)
    m, auto = microbatch_count(microbatches, cl.microbatches_per_step)
    check_stage_microbatches(m, cl.parallel.pp * cl.parallel.vpp)  # before any schedule is built
    limit = limit_bytes if limit_bytes is not None else cl.memory_limit_bytes
    p = cl.parallel
    check_schedule_option(schedule, vpp=p.vpp, placement=placement)
    if partition not in METHODS:
        raise InputError("--partition", f"unknown method {partition!r}", f"use one of {', '.join(METHODS)}")
    mode, table = tables[0]
    req = PlanRequest(pp=p.pp, vpp=p.vpp, microbatches=m, microbatch_size=cl.training.micro_batch_size,
                      search_microbatches=auto, batch_per_replica=cl.training.global_batch // p.dp,
                      pins=StagePins(first=first_stage_layers, last=last_stage_layers),
                      memory_limit_bytes=limit, schedule=schedule, partition=partition,
                      placement=placement, seed=seed, work_s=work, time_limit_s=time_limit, started_s=started,
                      objective=objective,
                      model=model_section(spec, table), cluster=cluster_section(cl.with_recompute(mode)),
                      parallel={"tp": p.tp, "ep": p.ep, "dp": p.dp, "cp": p.cp, "etp": p.etp},
                      peak_flops=cl.gpu.peak_flops, num_gpus=cl.num_gpus,
                      memory_limit_microbatches=limit_mb,
                      deadlines=deadlines_for(deadline, p.pp * p.vpp, m if not auto else None))
    req = replace(req, **fleet_request(cl, limit_bytes))
    check_shape(tgt, pp=p.pp, vpp=p.vpp, placement=placement, schedule=schedule, layout=req.model.layout,
                modes=[k for k, _ in tables], user_recompute=cl.training.recompute)

    def planned(on: ClusterSpec) -> Plan:  # on: cl, or cl with the dimension crossing its sites
        hopped = [(k, with_site_hop(t, on.sites, num_gpus=on.num_gpus, pp=on.parallel.pp)) for k, t in tables]

        def run(r: PlanRequest) -> Plan:  # DP traffic and the Adam step beside the schedule
            return add_dp_step(plan_for_target(tgt, hopped, r, lambda k, t: replace(
                r, model=model_section(spec, t), cluster=cluster_section(on.with_recompute(k)))), spec, on)
        if user is None:
            return run(req)
        from planner.planning.user_layout import plan_with_layout

        return plan_with_layout(run, req, user, keep=o.keep_layout)
    if cl.sites.count > 1:  # plan each dimension that may cross the slow link, keep the faster
        from planner.planning.sites import plan_sites

        return deliver(plan_sites(spec, cl, planned), deadlines=deadline)
    return deliver(planned(cl), deadlines=deadline)  # the plan must read back and validate


def _device_orders(model: str | None, cluster: str | Path | ClusterSpec | None, o: PlanOptions) -> LaunchPlan:
    """``--devices-order search``: ``plan`` for each order of the ``--devices`` groups, the fastest kept."""
    if o.devices_order not in DEVICE_ORDERS:
        raise InputError("--devices-order", f"unknown {o.devices_order!r}", f"use one of {', '.join(DEVICE_ORDERS)}")
    if o.devices is None:
        raise InputError("--devices-order", "needs --devices", "pass the fleet with --devices")
    return plan_device_orders(lambda d: plan(model, cluster, replace(o, devices=d, devices_order="given")),
                              o.devices, o.objective)


_PER_DEGREE = ("pp", "vpp", "tp", "ep", "dp", "microbatches", "memory_gib", "partition", "schedule", "placement",
               "profile", "seed", "first_stage_layers", "last_stage_layers", "memory_limit", "deadline", "target",
               "objective")
"""Options a ``--gpus`` search passes on to each degree choice it plans (the rest it sets itself)."""
