"""The costs a re-prediction uses, measured here: layers, fused pairs and the pipeline
message timed through the profiler's timers, and the emulated expert-parallel link of
``--link emulated`` with the table it adds to (sections below, each with its notes).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.pipelining._backward import stage_backward_input

from planner.core.costs import CostTable, LayerCost
from planner.core.layer_math import layer_forward_flops
from planner.core.op_sac import OP
from planner.core.plan import Plan
from planner.core.schedule import OVERLAP, ActionKind
from planner.replay.lowering import ReplayModel, build_stage, loss_fn
from profiler.measure import Sample, time_layer_calls
from profiler.pairs import time_pair_calls
from profiler.timing import Clock

__all__ = ["measure_layer_costs", "first_of_type", "layer_module", "sampler", "fused_type_pairs", "measure_hidden",
           "PairKey", "emulated_links", "link_table", "bytes_factor", "LINK_LABEL", "gpu_share", "link_options",
           "share_of_moe_time"]


# ---- costs measured here ------------------------------------------------------------------------
# The cost table a re-prediction uses: layers, fused pairs and the pipeline message, timed
# here through the profiler's timers on layers built as the replay builds them.
#
# Used to re-predict a plan made for other hardware (``planner.replay.predict``). Each layer
# type is built once, as the replay's stages build it (``build_stage``: its MoE exchanging
# over the replay's group or link, recomputing as the plan does), and timed as the pipeline
# runtime calls it (``profiler.measure.time_layer_calls``: F, torch's I and W, the full
# backward B, ``planner.core.costs`` [Note: full backward]). Every rank measures at once, so
# the cores are as busy as during the replay, and the medians are averaged over ranks. The
# pipeline message is ``profiler.comm.p2p_cost`` between ranks 0 and 1.
#
# [Note: link path] A replay with the emulated link runs every MoE layer through the
# exchange path (local copies, the counts exchange) even where the link takes no time, and
# on CPU that path takes a share of a stage's F and B of its own. So such a replay's table is
# timed with a zero-time ``EmulatedLink`` (the link's own time is added by
# the emulated link's section below), not with every expert local.
#
# [Note: pairs measured here] A fused pair hides what the overlap runtime (``planner.runtime``)
# manages to hide on this machine, which need not be what the planner's overlap model
# (``profiler.overlap_dag``, built for a GPU with two streams) says: the runtime computes one
# half at a time and hands over only at the all-to-alls, and under ``recompute: full`` the
# backward half has four exchanges per MoE layer to the forward's two. For each (forward
# layer type, backward layer type) that a fused action of the plan puts side by side
# (``planner.core.stage_costs.fused_range_cost``: F of the j-th forward layer beside the
# backward of the j-th layer from the end), one layer of each type is built as above and
# timed alone and fused through ``planner.runtime.baton.run_pair``
# (``profiler.pairs.time_pair_calls``). The seconds the pair hides (median of the paired
# differences alone - fused, averaged over ranks) replace the carried-over share
# ([Note: re-prediction with the link] below); negative when the two halves
# cost more fused than alone. Without the emulated link (``--ep 1``) a pair has no all-to-all
# to hide and is re-predicted as its two halves one after the other; hiding with ``--ep > 1``
# is measured by ``benchmarks/overlap.py``.


PairKey = tuple[str, str, bool]
"""(forward layer type, backward layer type, full backward B rather than I)."""


def first_of_type(rm: ReplayModel) -> dict[str, int]:
    """Index of the first layer of each layer type, in layer order (the one that is timed)."""
    first: dict[str, int] = {}
    for layer in rm.spec.layers:
        first.setdefault(layer.type_key, layer.index)
    return first


def layer_module(rm: ReplayModel, k: int, device: torch.device, recompute: str, ep_group: Any) -> Any:
    """Layer ``k`` alone as the replay builds it: its own stage module, recomputing as
    ``recompute`` says (``planner.runtime.apply_recompute``), its MoE exchanging over
    ``ep_group`` (``build_stage``)."""
    from planner.runtime import apply_recompute

    module = build_stage(rm, k, k + 1, device, ep_group=ep_group)
    apply_recompute(list(module.layers.values()), recompute)
    return module


def sampler(rm: ReplayModel, k: int, module: Any, device: torch.device) -> Sample:
    """One microbatch through layer ``k``'s ``module`` (``profiler.measure.Sample``): token
    ids into the embedding, random activations elsewhere, the loss after the head."""
    layer = rm.spec.layers[k]
    shape = (rm.microbatch_size, rm.seq_len)
    gen = torch.Generator().manual_seed(rm.seed + 7)
    target = torch.randint(0, rm.spec.vocab, shape, generator=gen).to(device)

    def forward() -> tuple[torch.Tensor, torch.Tensor, list | None]:
        if layer.role == "embedding":
            x = torch.randint(0, rm.spec.vocab, shape, generator=gen).to(device)
        else:
            x = torch.randn(*shape, rm.spec.hidden, generator=gen).to(device).requires_grad_()
        out = module(x)
        if layer.role == "head":
            out = loss_fn(out, target)
        return x, out, None if layer.role == "head" else [torch.ones_like(out)]
    return forward


def _rank_mean(values: list[Any], device: torch.device) -> torch.Tensor:
    """``values`` as a float64 tensor, averaged over the ranks (every rank calls it)."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized() and t.numel():
        dist.all_reduce(t)
        t /= dist.get_world_size()
    return t


def _time_layer(rm: ReplayModel, k: int, device: torch.device, clock: Clock, reps: int, recompute: str,
                ep_group: Any) -> tuple[float, float, float, float]:
    """Median (F, I, W, B) seconds of layer ``k`` built as the replay builds it. Under ``op``
    (torch's selective checkpointing: one backward per forward) I and W are the layer's
    without recomputation and B its own: an ``op`` plan runs whole Bs only."""
    module = layer_module(rm, k, device, recompute, ep_group)
    if recompute != OP:
        return time_layer_calls(module, sampler(rm, k, module, device), clock, repeats=reps)
    plain = layer_module(rm, k, device, "none", ep_group)
    f, i, w, _ = time_layer_calls(plain, sampler(rm, k, plain, device), clock, repeats=reps)
    b = time_layer_calls(module, sampler(rm, k, module, device), clock, repeats=reps, whole_only=True)[3]
    return f, i, w, b


def measure_layer_costs(rm: ReplayModel, device: torch.device, clock: Clock, *,
                        label: str, reps: int = 5, recompute: str = "none", ep_group: Any = None) -> CostTable:
    """Per-layer F, I, W, B measured here (one layer per type, averaged over ranks), the
    layers recomputing as ``recompute`` says (a full recomputation's backward runs the
    forward again, which a re-prediction of such a plan must count) and exchanging over
    ``ep_group`` as the replay's do ([Note: link path])."""
    first = first_of_type(rm)
    keys = list(first)
    times = _rank_mean([_time_layer(rm, first[t], device, clock, reps, recompute, ep_group) for t in keys], device)
    by_type = {t: tuple(float(v) for v in times[j]) for j, t in enumerate(keys)}
    tokens = rm.microbatch_size * rm.seq_len
    out_bytes = tokens * rm.spec.hidden * 4
    layers = []
    for layer in rm.spec.layers:
        f, i, w, b = by_type[layer.type_key]
        layers.append(LayerCost(
            type=layer.type_key, role=layer.role, f=f, i=i, w=w, b=b,
            out_bytes=0 if layer.role == "head" else out_bytes,
            flops=3.0 * layer_forward_flops(layer, rm.spec, rm.seq_len) * tokens))
    return CostTable(model=rm.spec.name, source="measured", layers=tuple(layers),
                     microbatch_size=rm.microbatch_size, seq_len=rm.seq_len, device=label,
                     scale=rm.scale, meta={"measured_by": "ppplan replay", "reps": reps, "recompute": recompute})


def fused_type_pairs(plan: Plan, rm: ReplayModel) -> list[PairKey]:
    """The layer-type pairs the plan's fused actions put side by side, sorted."""
    bounds, types = plan.bounds(), [layer.type_key for layer in rm.spec.layers]
    found: set[PairKey] = set()
    for actions in plan.parsed_schedule().values():
        for act in actions:
            if act.kind != OVERLAP:
                continue
            fwd, bwd = act.sub
            fl = list(range(*bounds[fwd.stage]))
            bl = list(reversed(range(*bounds[bwd.stage])))
            found.update((types[fl[j]], types[bl[j]], bwd.kind == ActionKind.B)
                         for j in range(min(len(fl), len(bl))))
    return sorted(found)


def _backward(module: Any, forward: Sample, full: bool) -> Callable[[], Callable[[], None]]:
    """``() -> backward``: the backward's own forward (untimed), then the backward the runtime
    runs: full B (``autograd.backward``) or torch's input-gradient (``stage_backward_input``;
    token ids have none, so the full backward stands in)."""
    def prepare() -> Callable[[], None]:
        x, out, grads = forward()

        def run() -> None:
            if full or not x.requires_grad:
                torch.autograd.backward([out], grads)
            else:
                stage_backward_input([out], grads, [x], module.parameters())
        return run
    return prepare


def _run_pair(forward: Callable[[], Any], backward: Callable[[], Any]) -> None:
    """The two halves fused as the replay's fused actions run them."""
    from planner.runtime.baton import run_pair
    from profiler.layers.program import set_wait_hook

    run_pair(forward, backward, timeout_s=120, install=set_wait_hook)


def measure_hidden(rm: ReplayModel, pairs: list[PairKey], device: torch.device, clock: Clock, *,
                   link: Any, recompute: str, reps: int = 7) -> dict[PairKey, float]:
    """Seconds each pair type hides fused, measured here ([Note: pairs measured here]);
    ``link`` is what the replay's MoE layers exchange over (``layer index -> EmulatedLink``)."""
    first = first_of_type(rm)
    used = sorted({first[t] for ta, tb, _ in pairs for t in (ta, tb)})
    modules = {k: layer_module(rm, k, device, recompute, link) for k in used}
    samplers = {k: sampler(rm, k, modules[k], device) for k in used}

    def hidden(ta: str, tb: str, full: bool) -> float:
        a, b = first[ta], first[tb]

        def reset() -> None:
            for k in {a, b}:
                modules[k].zero_grad(set_to_none=True)
        timing = time_pair_calls(samplers[a], _backward(modules[b], samplers[b], full), fuse=_run_pair,
                                 clock=clock, repeats=reps, reset=reset)
        return timing.hidden.median
    seconds = _rank_mean([hidden(*p) for p in pairs], device)
    return {p: float(v) for p, v in zip(pairs, seconds)}


# ---- the emulated link --------------------------------------------------------------------------
# The emulated expert-parallel link of ``ppplan replay --link emulated``.
#
# Every MoE all-to-all becomes a local copy of the same rows whose work completes no
# earlier than its issue time plus the time the analytical cost model
# (``profiler.analytical``, the plan's model on the plan's cluster) gives it, scaled to
# the replay's all-to-all bytes (hidden width x tokens per microbatch, relative to the
# plan's) and by ``--link-scale``. Compute stays real. On a machine whose loopback
# copies cost as much as the compute they should hide (2 shared CPU cores), it is the
# way to see hiding at a GPU-like communication share; every figure made with it is
# labelled emulated.
#
# [Note: link per exchange] Each of the four exchanges of a layer (dispatch, combine and
# their gradients) takes ``a2a_f / 2``: a gradient moves the same rows back
# (``profiler.analytical``: ``dispatch_b = combine``, ``combine_b = dispatch``). The
# table's ``a2a_b`` is not used per exchange: under ``recompute: full`` it also holds the
# recomputed forward's dispatch and combine (``profiler.analytical``: "the whole forward
# again, its dispatch and combine all-to-alls included"), and the replay's recomputation
# runs those through this link itself (``planner.runtime.recompute``). So a backward's
# link time totals the table's ``a2a_b`` in every mode, as ``link_table`` counts it.
#
# [Note: re-prediction with the link] A replay with this link re-predicts with the layer
# times measured here (above, no all-to-all) plus each layer's link time
# (``a2a_f``, ``a2a_b`` scaled as above) and, for each fused pair type, the planner's own
# overlap model (``profiler.overlap_dag`` through the analytical table) carried over as
# the share of the pair's all-to-all time it hides: ``(serial_pair - ov) / (a2a_f of a +
# a2a_b of b)`` on the GPU, times the pair's link time here. Not the share of the whole
# pair: the overlap runtime (``planner.runtime``) runs one half at a time and hides only
# all-to-all time, so where the link is a smaller part of a layer than on the GPU, a pair
# hides less of its total; a share of the pair would claim hidden compute. Nor does the
# GPU model's share hold here: with two streams a GPU hides an exchange behind any compute
# of the other microbatch, while the runtime's turns hide it only behind the other half's
# next segment; where compute is short beside the link (1/32 width on a CPU), the two
# halves' exchange chains overlap each other and a MoE/MoE pair hides about half its link
# time, against the GPU model's 0.84. So the replay measures the plan's fused pair types
# here, through the same link and the runtime's turns, and their measured seconds replace
# the carried-over share ([Note: pairs measured here] above);
# the share is carried over only for a pair type not measured. The report keeps both
# shares (``predicted.costs.link``).
#
# [Note: link share] At ``--link-scale 1`` the link takes the GPU's all-to-all time for the
# replay's bytes (1.9 us an exchange at 1/32 width), against CPU compute thousands of times
# slower than the GPU's: nothing to hide. So the scale is set by a share instead: the
# exchanges of the model's MoE layers take ``share`` of those layers' time, their F and
# full backward measured here (the replay's own table, timed through a zero-time link:
# [Note: link path] above) plus the exchanges:
# ``scale = share x compute / ((1 - share) x link at scale 1)``, summed over the MoE
# layers. The default share is the one the analytical model gives the same layers on the
# plan's cluster (the GPU's), so the replay sees the exchanges as large, relative to
# compute, as the plan's GPUs would. The table the re-prediction uses is measured again
# after the timed steps ([Note: table around the steps] in ``worker``), so the report
# gives the share realised in it beside the share asked for.


LINK_LABEL = "EMULATED expert-parallel link: all-to-alls are local copies held to the analytical model's time"


def _analytical(plan: Plan) -> CostTable:
    """The analytical cost table of ``plan``'s model on ``plan``'s cluster and parallelism."""
    from planner.core.cluster import cluster_from_dict
    from planner.core.hf_config import load_model
    from profiler.analytical import analytical_costs

    par = {k: plan.parallel[k] for k in ("pp", "tp", "ep", "dp") if k in plan.parallel}
    section = plan.cluster.to_dict()
    cluster = cluster_from_dict({**section, "parallel": {**section.get("parallel", {}), **par}})
    return analytical_costs(load_model(str(plan.model["name"])), cluster)


def bytes_factor(plan: Plan, rm: Any, full_hidden: int) -> float:
    """Replay all-to-all bytes over the plan's: (hidden x tokens per microbatch) of the
    replayed model ``rm`` over the plan's, ``full_hidden`` being the plan's hidden size."""
    plan_seq = int(plan.costs.get("seq_len") or plan.cluster.settings.seq_len or rm.seq_len)
    plan_mbs = int(plan.costs.get("microbatch_size") or rm.microbatch_size)
    return (rm.spec.hidden / full_hidden) * (rm.seq_len * rm.microbatch_size) / (plan_seq * plan_mbs)


def _factor(plan: Plan, rm: Any, scale: float) -> float:
    """``bytes_factor`` times ``scale`` (``--link-scale``)."""
    from planner.core.hf_config import load_model

    return scale * bytes_factor(plan, rm, load_model(str(plan.model["name"])).hidden)


def emulated_links(plan: Plan, rm: Any, *, scale: float) -> Callable[[int], Any]:
    """``layer index -> EmulatedLink`` for ``plan`` replayed as ``rm`` ([Note: link per exchange])."""
    from profiler.layers.program import EmulatedLink

    table = _analytical(plan)
    factor = _factor(plan, rm, scale)
    links = {}
    for k, lc in enumerate(table.layers):
        t = lc.a2a_f / 2 * factor
        links[k] = EmulatedLink(seconds={"dispatch": t, "combine": t, "dispatch.grad": t, "combine.grad": t})
    return lambda k: links[k]


def link_table(here: CostTable, plan: Plan, rm: Any, *, scale: float,
               hidden: dict[tuple[str, str, bool], float] | None = None) -> CostTable:
    """``here`` (layer times measured here, no all-to-all) with the emulated link's times and,
    for every fused pair type, the seconds it hides: measured here where ``hidden`` has the
    pair ([Note: pairs measured here]; the full-backward
    measurement where both kinds were), else the planner's hidden share carried over
    ([Note: re-prediction with the link])."""
    gpu = _analytical(plan)
    factor = _factor(plan, rm, scale)
    layers = tuple(replace(h, a2a_f=g.a2a_f * factor, a2a_b=g.a2a_b * factor)
                   for h, g in zip(here.layers, gpu.layers))
    measured = {(ta, tb): s for (ta, tb, full), s in sorted((hidden or {}).items(), key=lambda kv: kv[0][2])}
    first = {lc.type: k for k, lc in reversed(list(enumerate(gpu.layers)))}
    here_first = {lc.type: k for k, lc in reversed(list(enumerate(layers)))}
    pairs, shares, shares_here = {}, {}, {}
    for ta, tb in gpu.pairs:
        a, b = first[ta], first[tb]
        gpu_link = gpu.layers[a].a2a_f + gpu.layers[b].a2a_b
        share = (gpu.serial_pair(a, b) - gpu.ov(a, b)) / gpu_link if gpu_link else 0.0
        key = (layers[a].type, layers[b].type)
        link_s = layers[a].a2a_f + layers[b].a2a_b
        hid = measured.get(key, share * link_s)
        pairs[key] = layers[a].serial_f + layers[b].serial_i - hid
        shares[f"{key[0]}|{key[1]}"] = share
        if key in measured and link_s:
            shares_here[f"{key[0]}|{key[1]}"] = hid / link_s
    for (ta, tb), hid in measured.items():  # a measured pair the analytical table has no entry for
        if (ta, tb) not in pairs:
            a, b = here_first[ta], here_first[tb]
            pairs[(ta, tb)] = layers[a].serial_f + layers[b].serial_i - hid
    link = {"label": LINK_LABEL, "link_scale": scale, "bytes_factor": factor / scale,
            "share_of_moe_time": share_of_moe_time(replace(here, layers=layers)),
            "gpu_share_of_moe_time": share_of_moe_time(gpu), "hidden_share_of_link": shares}
    if measured:
        link["hidden_share_of_link_measured_here"] = shares_here
        link["hidden_s_measured_here"] = {f"{ta}|{tb}": s for (ta, tb), s in measured.items()}
    return replace(here, layers=layers, pairs=pairs, meta={**here.meta, "link": link})


def _moe_sums(layers: tuple[LayerCost, ...], links: tuple[LayerCost, ...], factor: float) -> tuple[float, float]:
    """(compute F + full backward of ``layers``, exchange time of ``links`` x ``factor``) over
    the layers whose ``links`` entry exchanges (the MoE layers)."""
    compute = link = 0.0
    for here, ln in zip(layers, links):
        if ln.a2a_f + ln.a2a_b > 0:
            compute += here.f + (here.i + here.w if here.b is None else here.b)
            link += (ln.a2a_f + ln.a2a_b) * factor
    return compute, link


def share_of_moe_time(table: CostTable) -> float | None:
    """The exchanges' share of the MoE layers' time in ``table`` ([Note: link share])."""
    compute, link = _moe_sums(table.layers, table.layers, 1.0)
    return link / (compute + link) if compute + link > 0 else None


def gpu_share(plan: Plan) -> float:
    """The exchanges' share of the MoE layers' time in the analytical model of ``plan``'s
    model on its cluster and parallelism (the default ``--link-share``; 0 without one)."""
    return share_of_moe_time(_analytical(plan)) or 0.0


def link_options(opts: Any, here: CostTable, plan: Plan, rm: Any) -> Any:
    """``opts`` (``ReplayOptions``) with the emulated link's scale set by its share, from the
    layer times ``here`` measured here ([Note: link share]); unchanged for the real link or
    an explicit ``link_scale``."""
    if opts.link != "emulated" or opts.link_scale is not None:
        return opts
    share = opts.link_share if opts.link_share is not None else gpu_share(plan)
    compute, link = _moe_sums(here.layers, _analytical(plan).layers, _factor(plan, rm, 1.0))
    if not link:
        from planner.core.errors import InputError

        raise InputError("--link", f"the plan's model has no all-to-all to emulate (EP {plan.parallel.get('ep', 1)})",
                         "replay with --link real")
    return replace(opts, link_share=share, link_scale=share * compute / ((1 - share) * link))
