"""The cluster one plan request runs on: a cluster file (or the model's shipped default, or
the command line's ``--gpus --gpu --global-batch --seq-len``) with the ``ppplan plan`` flags
on top, checked as the file's fields are.

One home for the rule, so ``ppplan plan``, ``ppplan profile --analytical``, ``--from-trace``
and the launcher examples resolve a cluster the same way (through ``planner.api``).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from planner.core.cluster import ClusterSpec, cluster_from_dict, default_cluster_path, load_cluster
from planner.core.errors import InputError
from planner.core.model import ModelSpec
from planner.core.offload import CHOICE_SEP, offload_choices, offload_mode
from planner.core.sites import SitesSpec, sites_from_config
from planner.core.targets import DEFAULT_TARGET

__all__ = ["resolve_cluster", "command_line_cluster", "batch_for_microbatches", "with_offload", "vpp_error"]


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


def batch_for_microbatches(cl: ClusterSpec, microbatches: int | str | None) -> ClusterSpec:
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


def with_offload(spec: ModelSpec, cl: ClusterSpec, given: str | tuple[str, ...] | None, runs: bool,
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


def vpp_error(spec: ModelSpec, pp: int, vpp: int) -> None:
    """pp x vpp stages must each get a layer: raise naming the vpp counts that work."""
    fits = spec.num_layers // pp
    n_dec = sum(layer.role == "decoder" for layer in spec.layers)
    even = [v for v in range(1, fits + 1) if n_dec % (pp * v) == 0]
    raise InputError("--vpp", f"pp x vpp = {pp}x{vpp} = {pp * vpp} stages but {spec.name} has "
                     f"{spec.num_layers} layers (embedding and head included)",
                     (f"use vpp 1..{fits} with pp {pp}" if fits else f"use pp <= {spec.num_layers}")
                     + (f"; vpp {', '.join(map(str, even))} split the {n_dec} decoder layers evenly" if even else ""))
