"""Measured cost table: run the layers on this device and assemble a ``CostTable``.

``measured_costs`` checks the request, finds the routing imbalance (a trace read by
``profiler.routing``, or the model's routers on sample tokens), runs the profiling
processes (``profiler.measure_launch``) and turns their measurements into the same
table format the analytical profiler writes (``assemble``); the method is in
docs/profiler.md.

[Note: capacity mode] With Megatron's ``--moe-expert-capacity-factor C``
(``profiler.layers.moe_capacity``) the layers are measured in that mode. Padded, every
expert computes ``C x`` the mean rows whatever the routing, so the measured work stands
(imbalance 1 for every layer); unpadded, a layer's imbalance is capped at ``max(C, 1)``.
``meta.moe_dispatch`` records the mode.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from planner.core.costs import CostTable, LayerCost, P2PCost
from planner.core.errors import InputError
from planner.core.layer_math import layer_forward_flops
from planner.core.model import LayerSpec, ModelSpec
from profiler.cpu_peak import measure_cpu_peak
from profiler.layers import scaled_model
from profiler.layers.moe_capacity import CapacityMode, capacity_mode, describe
from profiler.measure import LayerTiming
from profiler.measure_launch import launch
from profiler.measure_routing import sample_imbalance
from profiler.measure_worker import WorkerConfig, WorkerResult, measuring_processes
from profiler.routing import rank_imbalance

__all__ = ["ProfileRequest", "measured_costs", "check_request", "default_threads", "DEVICES"]

DEVICES = ("cpu", "cuda")
"""Devices the profiler measures on."""
MAX_PROCESSES = 1024
"""Most profiling processes one run starts (``--ep`` x ``--groups``)."""


@dataclass(frozen=True, kw_only=True)
class ProfileRequest:
    """What to measure and how."""

    device: str = "cpu"
    """cpu or cuda."""
    scale: float = 1 / 16
    """Width scale of the layer modules (1 = full size)."""
    ep: int = 1
    """Expert-parallel group size (processes exchanging tokens)."""
    groups: int = 1
    """Expert-parallel groups measuring their own copies of the layers at once (``ep x groups``
    processes), as a replay's pipeline stages each run their own group at the same time."""
    seq_len: int = 256
    """Tokens per sequence."""
    micro_batch: int = 1
    """Sequences per microbatch."""
    warmup: int = 1
    """Untimed runs before the timed ones."""
    repeats: int = 5
    """Timed runs per measurement."""
    seed: int = 0
    """Weights and inputs seed."""
    threads: int = 0
    """torch threads per process (0: automatic, see ``default_threads``)."""
    imbalance: dict[int, float] | None = None
    """Per MoE layer index: busiest EP rank / mean, from a routing trace (None: sample tokens)."""
    routing_source: str = ""
    """Where ``imbalance`` came from (trace paths), for the table's meta."""
    timeout_s: float = 900.0
    """Whole-run limit for the profiling processes."""
    measure_links: bool = True
    """Benchmark point-to-point and all-to-all links (needs a second process when ep is 1);
    without it the table keeps the default ``P2PCost``."""
    moe_expert_capacity_factor: float | None = None
    """Megatron's ``--moe-expert-capacity-factor`` (None: dropless); see [Note: capacity mode]."""
    moe_pad_expert_input_to_capacity: bool = False
    """Megatron's ``--moe-pad-expert-input-to-capacity``: fixed-size expert buffers."""
    moe_token_drop_policy: str = "probs"
    """Megatron's ``--moe-token-drop-policy``: probs or position."""
    modules: str = "native"
    """Layer modules measured: native (``profiler.layers``) or transformers (the family's
    own classes, ``profiler.hf``)."""
    model_config: dict[str, Any] | None = None
    """The model's parsed config.json for transformers modules (None: the shipped file)."""
    concurrent: bool = True
    """With ``ep == 1`` and a second process, both measure at once and their samples are
    pooled ([Note: concurrent ranks] in ``profiler.measure_worker``); False: rank 0 alone."""

    def moe_capacity(self) -> CapacityMode | None:
        """The MoE layers' capacity mode; ``InputError`` naming the flag on a bad value."""
        return capacity_mode(self.moe_expert_capacity_factor, pad=self.moe_pad_expert_input_to_capacity,
                             drop_policy=self.moe_token_drop_policy)


def check_request(model: ModelSpec, req: ProfileRequest) -> None:
    """One-line ``InputError`` for a request that cannot be measured."""
    import torch

    if req.device not in DEVICES:
        raise InputError("--device", f"unknown device {req.device!r}", f"use one of {', '.join(DEVICES)}")
    if req.device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device", "cuda requested but no CUDA device is available", "use --device cpu")
    if req.ep < 1:
        raise InputError("--ep", f"must be >= 1, got {req.ep}")
    _check_groups(req)
    ranks = req.ep * req.groups
    if req.device == "cuda" and ranks > torch.cuda.device_count():
        knob = "--ep" if req.groups == 1 else "--groups"
        raise InputError(knob, f"{ranks} ranks need {ranks} GPUs, found {torch.cuda.device_count()}",
                         f"lower {knob} or profile on the CPU")
    if req.ep > 1 and model.moe is None:
        raise InputError("--ep", f"{model.name} has no experts", "use --ep 1 for a dense model")
    spec = scaled_model(model, req.scale)
    for where, m in (("the model's", model), ("the scaled model's", spec)):
        if m.moe is not None and m.moe.num_experts % req.ep:
            raise InputError("--ep", f"{req.ep} does not divide {where} {m.moe.num_experts} experts",
                             "pick an expert-parallel size that divides the expert count"
                             + (" or change --scale" if m is spec else ""))
    req.moe_capacity()
    if req.modules != "native":
        from profiler.hf import check_source

        check_source(model, req.model_config, modules=req.modules, capacity=req.moe_capacity())
    if req.seq_len < 1 or req.micro_batch < 1 or req.repeats < 1 or req.warmup < 0:
        raise InputError("--seq-len/--micro-batch/--repeats", "must be positive")


def _check_groups(req: ProfileRequest) -> None:
    """One-line ``InputError`` for a ``groups`` the run cannot take."""
    if req.groups < 1:
        raise InputError("--groups", f"must be >= 1, got {req.groups}", "use --groups 1 for one group")
    if req.ep * req.groups > MAX_PROCESSES:
        raise InputError("--groups", f"--ep {req.ep} x --groups {req.groups} is {req.ep * req.groups} processes, "
                                     f"over {MAX_PROCESSES}", "lower --groups")
    if req.groups > 1 and not req.concurrent:
        raise InputError("--alone", f"times on one process, but --groups {req.groups} has every group measure",
                         "drop --alone or use --groups 1")


def _world(req: ProfileRequest) -> int:
    """Processes to start: ``ep x groups``, at least the two a link benchmark needs when it runs."""
    ranks = req.ep * req.groups
    if not req.measure_links:
        return ranks
    if req.device == "cuda":
        import torch

        return max(ranks, 2) if torch.cuda.device_count() >= 2 else ranks
    return max(ranks, 2)


def measured_costs(model: ModelSpec, req: ProfileRequest, *,
                   progress: Callable[[str, int, int], None] | None = None) -> CostTable:
    """Measure ``model`` as ``req`` asks; ``progress(label, done, total)`` after each item."""
    check_request(model, req)
    t0 = time.monotonic()
    if req.imbalance is not None:
        imbalance, source = dict(req.imbalance), req.routing_source or "trace"
    else:
        imbalance, _ = sample_imbalance(model, scale=req.scale, ep=req.ep, seq_len=req.seq_len,
                                        batch=req.micro_batch, seed=req.seed)
        source = "sample tokens"
    world = _world(req)
    n_types = len(model.type_keys())
    total = n_types + n_types ** 2 + (1 if world > 1 else 0)
    done = [0]

    def report(label: str) -> None:
        done[0] += 1
        if progress:
            progress(label, done[0], total)

    threads = req.threads or default_threads(req.device, req.ep * req.groups)
    cfg = WorkerConfig(model=model, scale=req.scale, ep=req.ep, device=req.device, seq_len=req.seq_len,
                       micro_batch=req.micro_batch, warmup=req.warmup, repeats=req.repeats,
                       seed=req.seed, threads=threads, timeout_s=req.timeout_s,
                       moe_capacity=req.moe_capacity(), modules=req.modules, raw_config=_raw(model, req),
                       concurrent=req.concurrent)
    # measured before the profiling processes start, the machine then as idle as this run finds it
    peak = measure_cpu_peak(threads) if req.device == "cpu" else None
    result = launch(cfg, world, timeout_s=req.timeout_s, progress=report)
    table = assemble(model, req, result, _capacity_imbalance(imbalance, req.moe_capacity()))
    meta = dict(table.meta, routing=source, wall_s=round(time.monotonic() - t0, 3), processes=world)
    if peak is not None:
        meta["cpu_peak"] = peak  # the replay's MFU denominator (profiler.cpu_peak)
    meta["profiler"] = dict(meta["profiler"], threads=threads,
                            measuring_processes=measuring_processes(req.ep, req.concurrent, world),
                            groups=req.groups)
    meta["modules"] = _sources(model, req, cfg.raw_config)
    return replace(table, meta=meta)


def _raw(model: ModelSpec, req: ProfileRequest) -> dict[str, Any] | None:
    if req.modules == "native":
        return None
    from profiler.hf.config import raw_config

    return req.model_config or raw_config(model)


def _sources(model: ModelSpec, req: ProfileRequest, raw: dict[str, Any] | None) -> dict[str, object]:
    """Which library, version and class each layer type was measured with."""
    from profiler.hf import layer_source
    from profiler.measure_worker import representatives

    return {"source": req.modules,
            "layers": {t: layer_source(model, layer, raw=raw, modules=req.modules, scale=req.scale)
                       for t, layer in representatives(model).items()}}


def default_threads(device: str, processes: int) -> int:
    """torch threads per profiling process when ``--threads`` is 0.

    [Note: CPU threads] On the CPU a pipeline rank's "device" is its share of the cores:
    ``ppplan replay`` gives each of its ranks ``cores // ranks`` threads, and every rank
    computes at once. The profiler measures with the share a rank of a two-rank replay
    gets (``cores // 2``, at least 1; ``cores // n`` with ``n`` measuring processes,
    ``--ep`` x ``--groups``),
    not torch's default of every core: on the user's path (2 cores, pp 2) the profile
    was taken with 2 threads and replayed with 1, and with other jobs on the machine
    a 2-thread process waits for its descheduled thread at every parallel region
    (measured in docs/replay.md). The count used is in
    the table's ``meta.profiler.threads``; pass ``--threads`` to match another replay.
    On a GPU the count only drives the host side and torch's default is kept.
    """
    import os

    import torch

    if device == "cuda":
        return torch.get_num_threads()
    return max(1, (os.cpu_count() or 1) // max(2, processes))


def _capacity_imbalance(imbalance: dict[int, float], mode: CapacityMode | None) -> dict[int, float]:
    """The imbalance the layers see in capacity mode ([Note: capacity mode])."""
    if mode is None:
        return imbalance
    return {} if mode.pad else {k: min(v, max(mode.factor, 1.0)) for k, v in imbalance.items()}


def _imbalance(layer: LayerSpec, imbalance: dict[int, float]) -> float:
    return max(1.0, round(imbalance.get(layer.index, 1.0), 3)) if layer.is_moe else 1.0


def _layer_cost(layer: LayerSpec, lt: LayerTiming, imb: float, req: ProfileRequest,
                spec: ModelSpec, a2a_bw: float) -> LayerCost:
    measured = rank_imbalance(list(lt.tokens_per_expert), req.ep) if lt.tokens_per_expert else 1.0
    k = imb / measured                         # expert work at the target load
    ef, ei, ew, eb = lt.expert
    extra_comm = (imb - measured) * lt.a2a_bytes / measured / a2a_bw if lt.a2a_bytes else 0.0
    numel = lt.param_bytes // 4 if lt.param_bytes else 0
    return LayerCost(
        type=layer.type_key if imb == 1.0 else f"{layer.type_key}@{layer.index}",
        role=layer.role,
        f=lt.f.median + (k - 1) * ef, i=lt.i.median + (k - 1) * ei, w=lt.w.median + (k - 1) * ew,
        b=lt.b.median + (k - 1) * eb,
        a2a_f=max(0.0, lt.a2a_f.median + extra_comm), a2a_b=max(0.0, lt.a2a_b.median + extra_comm),
        act_bytes=lt.act_bytes, act_w_bytes=lt.act_w_bytes, param_bytes=lt.param_bytes,
        grad_bytes=4 * numel, optim_bytes=12 * numel, out_bytes=lt.out_bytes,
        flops=3.0 * req.micro_batch * req.seq_len * layer_forward_flops(layer, spec, req.seq_len),
        imbalance=imb)


def assemble(model: ModelSpec, req: ProfileRequest, result: WorkerResult,
             imbalance: dict[int, float]) -> CostTable:
    """Cost table from the measurements, field by field:

    - ``f``, ``i``, ``w``, ``b`` (full backward, one autograd pass: ``planner.core.costs``
      [Note: full backward]): compute medians of the layer's type; the routed-expert part is
      first brought to a balanced load (divided by the imbalance of the measured batch)
      and then multiplied by the layer's imbalance (busiest EP rank / mean);
    - ``a2a_f``, ``a2a_b``: exposed all-to-all medians plus the extra volume of the
      straggler, ``(imbalance - 1) x bytes / fitted all-to-all bandwidth``;
    - pairs: every distinct type pair is measured overlapped and serial back to back
      (``profiler.pairs``); ``OV[a, b] = (OV / serial)_measured x (F[a] + A_F[a] + I[b] +
      A_B[b])``, the measured hidden share applied to the per-layer medians, so a pair and
      its layers agree even when the machine's speed drifted between the two
      measurements. A layer whose imbalance is not 1 gets its own type ``type@index`` (as
      in ``profiler.analytical``); its pairs add the layer's extra serial time to the base
      pair's, i.e. the straggler's extra work is assumed exposed (an upper bound);
    - memory: measured saved-activation and parameter bytes; gradients 4 B and Adam state
      12 B per parameter (fp32, as Megatron keeps them), not sharded;
    - ``flops``: the model FLOPs of the reduced-width layer (``planner.core.layer_math``).
    """
    spec = scaled_model(model, req.scale)
    a2a_bw = result.a2a.bandwidth if result.a2a else math.inf
    layers, base_of = [], {}
    for layer in model.layers:
        lt = result.layers[layer.type_key]
        cost = _layer_cost(layer, lt, _imbalance(layer, imbalance), req, spec, a2a_bw)
        layers.append(cost)
        base_of[cost.type] = (layer.type_key, cost.serial_f - lt.f.median - lt.a2a_f.median,
                              cost.serial_i - lt.i.median - lt.a2a_b.median)
    pairs = {}
    lts = result.layers
    for ta, (base_a, extra_f, _) in base_of.items():
        for tb, (base_b, _, extra_i) in base_of.items():
            if (base_a, base_b) in result.pairs:
                ratio = result.pairs[(base_a, base_b)].ratio.median
                serial = lts[base_a].f.median + lts[base_a].a2a_f.median + lts[base_b].i.median \
                    + lts[base_b].a2a_b.median
                pairs[(ta, tb)] = ratio * serial + extra_f + extra_i
    p2p = P2PCost(latency_s=result.p2p.latency_s, bandwidth=result.p2p.bandwidth) if result.p2p else P2PCost()
    return CostTable(model=model.name, source="measured", layers=tuple(layers), pairs=pairs, p2p=p2p,
                     microbatch_size=req.micro_batch, seq_len=req.seq_len,
                     size_curve=((req.micro_batch, 1.0),), device=result.device_name,
                     scale=req.scale, meta=_meta(req, spec, result))


def _meta(req: ProfileRequest, spec: ModelSpec, result: WorkerResult) -> dict[str, object]:
    layers = result.layers
    pair_rows = {f"{a} / {b}": {"ov": p.ov.median, "serial": p.serial.median,
                                "hidden_share": 1.0 - p.ratio.median, "cv": p.ov.cv,
                                "serial_cv": p.serial.cv}
                 for (a, b), p in result.pairs.items()}
    link = lambda fit: None if fit is None else {  # noqa: E731 - tiny formatter
        "latency_s": float(fit.latency_s), "bandwidth": float(fit.bandwidth), "points": [list(p) for p in fit.points]}
    return {
        "profiler": {"device": req.device, "ep": req.ep, "seq_len": req.seq_len,
                     "micro_batch": req.micro_batch, "warmup": req.warmup, "repeats": req.repeats,
                     "seed": req.seed, "hidden": spec.hidden, "vocab": spec.vocab,
                     "experts": spec.moe.num_experts if spec.moe else 0,
                     "top_k": spec.moe.top_k if spec.moe else 0},
        "cv": {t: {"f": lt.f.cv, "i": lt.i.cv, "w": lt.w.cv, "b": lt.b.cv, "a2a_f": lt.a2a_f.cv, "a2a_b": lt.a2a_b.cv}
               for t, lt in layers.items()},
        "measured_imbalance": {t: rank_imbalance(list(lt.tokens_per_expert), req.ep)
                               for t, lt in layers.items() if lt.tokens_per_expert},
        "pairs": pair_rows,
        "moe_dispatch": describe(req.moe_capacity()),
        "p2p_fit": link(result.p2p) or "default (one process: no link to measure)",
        "a2a_fit": link(result.a2a),
    }
