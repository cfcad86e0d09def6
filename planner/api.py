"""Python API for launchers: ``plan(...)`` mirrors ``ppplan plan`` option for option."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.core.cluster import ClusterSpec, cluster_from_dict, default_cluster_path, load_cluster
from planner.core.costs import CostTable
from planner.core.costs_io import load_costs
from planner.core.devices import DEVICE_ORDERS
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.limits import check_stage_microbatches
from planner.core.model import ModelSpec
from planner.core.plan import ModelInfo, Plan, load_plan_file
from planner.core.plan_records import ClusterInfo
from planner.core.recompute import is_module_set, module_sets_in, modules_of
from planner.core.sites import SitesSpec, with_site_hop
from planner.core.targets import DEFAULT_TARGET, get_target
from planner.export import LaunchPlan
from planner.core.offload import CHOICE_SEP, offload_choices, offload_mode
from planner.options import PlanOptions, plan_options, recompute_mode
from planner.planning import PlanRequest
from planner.planning.delivery import deliver
from planner.planning.dp_step import add_dp_step
from planner.planning.fleet import fleet_costs, fleet_request, plan_device_orders
from planner.planning.targets import check_shape, plan_for_target
from solvers.partition.pins import StagePins
from solvers.schedule.search.budget import check_time_limit, check_work
from solvers.schedule.search.deadlines import parse_deadlines
from solvers.schedule.engines.memory_limit import parse_memory_limit
from solvers.partition.search import METHODS
from solvers.schedule.search.search import check_objective, check_schedule_option

__all__ = ["plan", "load_plan", "PlanOptions", "DEFAULT_MODEL", "resolve_cluster", "model_section"]

DEFAULT_MODEL = "qwen3-next-80b-a3b"


def load_plan(path: str | Path) -> LaunchPlan:
    """Load and check a plan JSON file; the ``LaunchPlan`` ``plan`` returns."""
    return LaunchPlan.of(load_plan_file(path))


def resolve_cluster(model: ModelSpec, cluster: str | Path | ClusterSpec | None, *,
                    pp: int | None = None, vpp: int | None = None, tp: int | None = None,
                    ep: int | None = None, dp: int | None = None,
                    global_batch: int | None = None, seq_len: int | None = None,
                    micro_batch_size: int | None = None, recompute: str | None = None,
                    gpu: str | None = None, target: str = DEFAULT_TARGET,
                    devices: str | None = None, sites: dict[str, Any] | None = None) -> ClusterSpec:
    """The cluster for ``model``: given, or the model's shipped default, with overrides (``sites``:
    the ``--sites`` flags, by ``sites`` field name); with
    ``target`` megatron or torchtitan, that framework's recipe fills the fields the file
    leaves open (``planner.core.recipes``); ``devices`` (``--devices h100:16,a100:16``) puts
    it on a mixed fleet (``planner.core.devices``: pp follows, or dp when ``pp`` is given)."""
    if isinstance(cluster, ClusterSpec):
        spec = cluster
    else:
        path = cluster if cluster is not None else default_cluster_path(model.name)
        if path is None:
            raise InputError("--cluster", f"model {model.name!r} has no default cluster",
                             "pass --cluster FILE (see planner/data/clusters/), or --gpus N --gpu NAME "
                             "--global-batch B --seq-len S")
        spec = load_cluster(path)
    if gpu is not None:
        from planner.core.hardware import gpu_from_config

        spec = replace(spec, gpu=gpu_from_config(gpu, where="--gpu"))
    if devices is not None:
        from planner.core.devices import parse_devices

        if gpu is not None:
            raise InputError("--gpu", "given together with --devices", "name each group's type in --devices")

        spec = spec.with_devices(parse_devices(devices), keep_pp=pp is not None)
    changes = {k: v for k, v in dict(pp=pp, vpp=vpp, tp=tp, ep=ep, dp=dp).items() if v is not None}
    if changes:
        spec = spec.with_parallel(**changes)
    train = {k: v for k, v in dict(global_batch=global_batch, seq_len=seq_len,
                                   micro_batch_size=micro_batch_size, recompute=recompute).items()
             if v is not None}
    if train:
        spec = replace(spec, training=replace(spec.training, **train))
    if sites:
        spec = replace(spec, sites=_sites_override(spec, sites))
    if dp is None and (pp is not None or tp is not None):
        p = spec.parallel
        if p.pp * p.tp * p.dp != spec.num_gpus:
            raise InputError("--pp", f"pp x tp = {p.pp}x{p.tp} does not divide {spec.num_gpus} GPUs",
                             "pick pp x tp dividing the GPU count or pass --dp")
    spec = spec.for_target(target)
    try:
        return spec.check().check_against(model)
    except InputError as exc:  # the fleet came from --devices, not the file's devices: name the flag
        if devices is None or exc.field != "devices":
            raise
        raise InputError("--devices", exc.problem, exc.fix) from None


def _sites_override(spec: ClusterSpec, flags: dict[str, Any]) -> SitesSpec:
    """The cluster's ``sites`` with the ``--sites`` flags on top, checked as a cluster file's."""
    from dataclasses import asdict

    from planner.core.sites import sites_from_config

    merged = {**asdict(spec.sites), **flags}
    if merged["count"] == 1 and set(flags) - {"count"}:
        name = "--inter-site-gbps" if "inter_site_gbps" in flags else "--inter-site-latency-ms"
        raise InputError(name, "needs more than one site", "pass --sites 2 (or a sites section in the cluster file)")
    if merged["count"] > 1 and not merged["inter_site_gbps"]:
        raise InputError("--inter-site-gbps", f"is needed with {merged['count']} sites",
                         "give the inter-site bandwidth in Gb/s, e.g. --inter-site-gbps 100")
    return sites_from_config(merged, where="sites")


def command_line_cluster(gpus: int, *, gpu: str | None, global_batch: int | None,
                         seq_len: int | None) -> ClusterSpec:
    """The cluster a command line describes for a model with no shipped cluster (any HF
    config.json): ``--gpus``, ``--gpu``, ``--global-batch`` and ``--seq-len``; nodes of 8 GPUs,
    the cluster file's defaults for the rest (``planner/data/schemas/cluster.schema.json``)."""
    missing = [name for name, value in (("--gpu", gpu), ("--global-batch", global_batch), ("--seq-len", seq_len))
               if value is None]
    if missing:
        raise InputError(missing[0], "is needed to plan a model that has no shipped cluster",
                         "pass --gpu NAME --global-batch B --seq-len S with --gpus N, or --cluster FILE")
    return cluster_from_dict({"gpu": gpu, "num_gpus": gpus, "gpus_per_node": min(8, gpus),
                              "parallel": {"pp": 1, "tp": 1, "ep": 1, "dp": gpus},
                              "training": {"global_batch": global_batch, "seq_len": seq_len, "micro_batch_size": 1}},
                             where="command line")


def model_section(model: ModelSpec, table: CostTable | None = None) -> ModelInfo:
    """The plan's ``model`` part."""
    return ModelInfo(name=model.name, num_layers=model.num_layers, layout=model.layout,
                     layer_types=tuple(lc.type for lc in table.layers) if table else tuple(model.type_keys()))


def cluster_section(spec: ClusterSpec) -> ClusterInfo:
    """The plan's ``cluster`` section."""
    from dataclasses import asdict

    training = {k: v for k, v in asdict(spec.training).items()
                if k not in _UNSET_WHEN_DEFAULT or v != _UNSET_WHEN_DEFAULT[k]}
    gpu = {k: v for k, v in asdict(spec.gpu).items()
           if k != "host_bandwidth" or spec.training.offload != _UNSET_WHEN_DEFAULT["offload"]}
    return ClusterInfo.from_dict({"gpu": gpu, "num_gpus": spec.num_gpus,
                                  "gpus_per_node": spec.gpus_per_node, "training": training,
                                  "network": asdict(spec.network),
                                  **({"devices": [{"type": g.name, "count": g.count, "gpus_per_node": g.gpus_per_node,
                                                   "peak_flops": g.gpu.peak_flops}
                                                  for g in spec.devices]} if spec.devices else {})})


_UNSET_WHEN_DEFAULT = {"moe_expert_capacity_factor": None, "moe_pad_expert_input_to_capacity": False,
                       "offload": "none", "cuda_graph_scope": "auto", "cp_comm_type": "auto",
                       "param_dtype": "fp32", "fsdp_experts": "shard", "grad_reduce_in_fp32": True}
"""Training fields a plan records only when set (MoE capacity mode, activation offloading, a
CUDA-graph scope, a context-parallel implementation, BF16 parameters or gradients, AutoModel's
expert sharding), so plans that leave them out read as before (the GPU's host link is recorded
only with offloading too)."""


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
    limit_bytes, limit_mb = _memory_options(o.memory_gib, o.memory_limit)
    if o.keep_layout and o.layout is None:
        raise InputError("--keep-layout", "needs --layout", "pass --layout LAYOUT or drop --keep-layout")
    if model is None and profile is not None:  # bring your own costs
        if o.layout is not None:
            raise InputError("--layout", "needs a MODEL (its layers are what the layout places)",
                             "pass the MODEL the profile was measured for")
        if o.devices is not None:
            raise InputError("--devices", "needs a MODEL (the fleet's costs come from the analytical model)",
                             "pass the MODEL, and leave out --profile")
        if sites:
            raise InputError("--sites", "needs a MODEL (its cluster is what the sites split)",
                             "pass the MODEL the profile was measured for")
        if tgt.name != DEFAULT_TARGET:
            raise InputError("--target", "planning from a profile without a MODEL supports only --target torch",
                             "pass the MODEL the profile was measured for")
        from planner.planning.byo_costs import plan_from_profile

        check_schedule_option(schedule, vpp=vpp or 1, placement=placement)
        return deliver(plan_from_profile(profile, pp=pp, vpp=vpp, microbatches=microbatches,
                                         memory_limit_bytes=limit_bytes, memory_limit_microbatches=limit_mb,
                                         schedule=schedule, partition=partition, placement=placement, seed=seed,
                                         work=work, time_limit=time_limit, started=started, objective=objective,
                                         deadlines=_deadlines(deadline, pp * (vpp or 1) if pp else 0,
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
        if base.devices:
            raise InputError("--gpus", "the cluster file lists device groups; the degree search plans one GPU type",
                             "leave out --gpus (the groups fix the GPUs), or plan a cluster without devices")
        if CHOICE_SEP in base.training.offload:  # else the cost model's "a cost table is for one mode"
            raise InputError("training.offload", "a choice of offloading modes with --gpus (the degree search "
                             "plans one mode)", "give one mode, or the degrees (--pp/--tp/--dp) instead of --gpus")
        if gpus % base.sites.count:
            raise InputError("--gpus", f"{gpus} GPUs do not split evenly over {base.sites.count} sites",
                             f"use a multiple of {base.sites.count}")
        rest = {k: getattr(o, k) for k in _PER_DEGREE}
        return deliver(plan_for_gpus(plan, model or DEFAULT_MODEL, spec, base, gpus, work=work,
                                     time_limit=time_limit, started=started, options=rest), deadlines=deadline)
    try:
        cl = resolve_cluster(spec, cluster, pp=pp, vpp=vpp, tp=tp, ep=ep, dp=dp,
                             global_batch=global_batch, seq_len=seq_len, recompute=recompute, gpu=gpu,
                             target=tgt.name, devices=o.devices, sites=sites)
    except InputError as exc:
        if exc.field == "parallel.pp" and vpp is not None and vpp > 1:
            _vpp_error(spec, pp or resolve_cluster(spec, cluster, tp=tp, ep=ep, dp=dp).parallel.pp, vpp)
        raise
    cl = _batch_for_microbatches(cl, microbatches)
    cl = _with_offload(spec, cl, o.offload, tgt.offload, tgt.name)
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
    tables = _costs(spec, cl, profile)
    auto = microbatches == "auto"
    if isinstance(microbatches, str) and not auto:
        raise InputError("--microbatches", f"expected a positive integer or auto, got {microbatches!r}")
    m = microbatches if microbatches is not None and not auto else cl.microbatches_per_step
    if m < 1:
        raise InputError("--microbatches", f"must be >= 1, got {m}")
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
                      deadlines=_deadlines(deadline, p.pp * p.vpp, m if not auto else None))
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


def _memory_options(memory_gib: float | None, memory_limit: str | None) -> tuple[int | None, float | None]:
    """``--memory-gib`` / ``--memory-limit`` to (bytes per GPU, microbatches of activations)."""
    if memory_limit is None:
        return (int(memory_gib * 2**30) if memory_gib is not None else None), None
    if memory_gib is not None:
        raise InputError("--memory-limit", "given together with --memory-gib", "pass only one of them")
    parsed = parse_memory_limit(memory_limit)
    return parsed.bytes, parsed.microbatches


def _deadlines(items, num_stages: int, microbatches) -> dict:
    """``--deadline TASK=SECONDS`` items to a deadline per task."""
    if not items:
        return {}
    if not isinstance(microbatches, int):
        raise InputError("--deadline", "needs a fixed --microbatches count", "pass --microbatches M")
    return parse_deadlines(list(items), num_stages=num_stages, microbatches=microbatches)


def _batch_for_microbatches(cl: ClusterSpec, microbatches: int | str | None) -> ClusterSpec:
    """``--microbatches M`` splits the per-replica batch into M microbatches, so
    the micro-batch size becomes batch / M (and the costs are taken at that size); an M
    that does not divide the batch is refused, naming the counts that do."""
    if not isinstance(microbatches, int) or isinstance(microbatches, bool) or microbatches < 1:
        return cl  # auto, the default, or a count ``plan`` refuses itself
    batch = cl.training.global_batch // cl.parallel.dp
    if microbatches > batch or batch % microbatches:
        fits = [d for d in range(1, batch + 1) if batch % d == 0]
        raise InputError("--microbatches", f"{microbatches} does not divide the per-replica batch {batch} "
                         f"(global batch {cl.training.global_batch} / dp {cl.parallel.dp})",
                         f"use one of {', '.join(map(str, fits[-8:]))} or change --global-batch")
    return replace(cl, training=replace(cl.training, micro_batch_size=batch // microbatches))


def _vpp_error(spec: ModelSpec, pp: int, vpp: int) -> None:
    """pp x vpp stages must each get a layer: raise naming the vpp counts that work."""
    fits = spec.num_layers // pp
    n_dec = sum(layer.role == "decoder" for layer in spec.layers)
    even = [v for v in range(1, fits + 1) if n_dec % (pp * v) == 0]
    raise InputError("--vpp", f"pp x vpp = {pp}x{vpp} = {pp * vpp} stages but {spec.name} has "
                     f"{spec.num_layers} layers (embedding and head included)",
                     (f"use vpp 1..{fits} with pp {pp}" if fits else f"use pp <= {spec.num_layers}")
                     + (f"; vpp {', '.join(map(str, even))} split the {n_dec} decoder layers evenly" if even else ""))


def _with_offload(spec: ModelSpec, cl: ClusterSpec, given: str | tuple[str, ...] | None, runs: bool,
                  target: str) -> ClusterSpec:
    """``cl`` with ``--offload`` if given (checked as the cluster file's field is; given more than
    once, a choice), refused in one line where ``--target`` does not offload activations
    (``Target.offload``)."""
    if isinstance(given, (tuple, list)):
        given = CHOICE_SEP.join(given) if given else None
    if given is not None:
        cl = replace(cl, training=replace(cl.training, offload=offload_mode(given, field="--offload")))
        try:
            cl.check().check_against(spec)
        except InputError as exc:  # what --offload asks the cluster cannot run: name the flag given
            if exc.field != "training.offload":
                raise
            raise InputError("--offload", exc.problem, exc.fix) from None
    if any(m != "none" for m in offload_choices(cl.training.offload)) and not runs:
        flag = given is not None  # named as the user gave it: the flag, or the cluster file's field
        raise InputError("--offload" if flag else "training.offload", f"--target {target} does not offload activations",
                         "use --target megatron, or " + ("drop --offload" if flag else "offload: none"))
    return cl


def _costs(spec: ModelSpec, cl: ClusterSpec, profile: str | Path | None) -> list[tuple[str, CostTable]]:
    """(recompute mode, cost table) pairs to plan with: one per mode of ``cl`` (all three for
    ``recompute: auto``) from the analytical model, or the measured profile's one (its
    ``meta.recompute``, default none: ``ppplan profile`` measures without recomputation)."""
    if profile is None:
        from profiler.analytical import analytical_costs

        costs = fleet_costs if cl.devices else analytical_costs
        return [(mode, costs(spec, cl.with_recompute(mode))) for mode in cl.training.recompute_modes()]
    if cl.devices:
        raise InputError("--devices", "plans from the analytical model; a measured profile is of one GPU type",
                         "leave out --profile, or plan each group's profile on its own")
    table = load_costs(profile)
    if table.num_layers != spec.num_layers:
        raise InputError("--profile", f"has {table.num_layers} layers, model {spec.name} has "
                         f"{spec.num_layers}", "profile the same model")
    mode = str(table.meta.get("recompute") or "none")
    if cl.training.recompute not in ("auto", mode):
        asked = cl.training.recompute
        if is_module_set(asked):  # Megatron's module lists: name them as the user gave them
            lists = " / ".join(",".join(modules_of(m)) for m in module_sets_in(asked))
            raise InputError("--recompute-modules", f"{lists} given but the profile was measured with recompute "
                             f"{mode}", f"drop --recompute-modules (or training.recompute's list), or re-profile")
        raise InputError("--recompute", f"{asked} given but the profile was measured with {mode}",
                         f"pass --recompute {mode} or re-profile")
    return [(mode, table.at_microbatch_size(cl.training.micro_batch_size))]
