"""The emulated expert-parallel link of ``ppplan replay --link emulated``.

Every MoE all-to-all becomes a local copy of the same rows whose work completes no
earlier than its issue time plus the time the analytical cost model
(``profiler.analytical``, the plan's model on the plan's cluster) gives it, scaled to
the replay's all-to-all bytes (hidden width x tokens per microbatch, relative to the
plan's) and by ``--link-scale``. Compute stays real. On a machine whose loopback
copies cost as much as the compute they should hide (2 shared CPU cores), it is the
way to see hiding at a GPU-like communication share; every figure made with it is
labelled emulated.

[Note: link per exchange] Each of the four exchanges of a layer (dispatch, combine and
their gradients) takes ``a2a_f / 2``: a gradient moves the same rows back
(``profiler.analytical``: ``dispatch_b = combine``, ``combine_b = dispatch``). The
table's ``a2a_b`` is not used per exchange: under ``recompute: full`` it also holds the
recomputed forward's dispatch and combine (``profiler.analytical``: "the whole forward
again, its dispatch and combine all-to-alls included"), and the replay's recomputation
runs those through this link itself (``planner.runtime.recompute``). So a backward's
link time totals the table's ``a2a_b`` in every mode, as ``link_table`` counts it.

[Note: re-prediction with the link] A replay with this link re-predicts with the layer
times measured here (``planner.replay.costs``, no all-to-all) plus each layer's link time
(``a2a_f``, ``a2a_b`` scaled as above) and, for each fused pair type, the planner's own
overlap model (``profiler.overlap_dag`` through the analytical table) carried over as
the share of the pair's all-to-all time it hides: ``(serial_pair - ov) / (a2a_f of a +
a2a_b of b)`` on the GPU, times the pair's link time here. Not the share of the whole
pair: the overlap runtime (``planner.runtime``) runs one half at a time and hides only
all-to-all time, so where the link is a smaller part of a layer than on the GPU, a pair
hides less of its total; a share of the pair would claim hidden compute. Nor does the
GPU model's share hold here: with two streams a GPU hides an exchange behind any compute
of the other microbatch, while the runtime's turns hide it only behind the other half's
next segment; where compute is short beside the link (1/32 width on a CPU), the two
halves' exchange chains overlap each other and a MoE/MoE pair hides about half its link
time, against the GPU model's 0.84. So the replay measures the plan's fused pair types
here, through the same link and the runtime's turns, and their measured seconds replace
the carried-over share (``planner.replay.costs`` [Note: pairs measured here]);
the share is carried over only for a pair type not measured. The report keeps both
shares (``predicted.costs.link``).

[Note: link share] At ``--link-scale 1`` the link takes the GPU's all-to-all time for the
replay's bytes (1.9 us an exchange at 1/32 width), against CPU compute thousands of times
slower than the GPU's: nothing to hide. So the scale is set by a share instead: the
exchanges of the model's MoE layers take ``share`` of those layers' time, their F and
full backward measured here (the replay's own table, timed through a zero-time link:
``planner.replay.costs`` [Note: link path]) plus the exchanges:
``scale = share x compute / ((1 - share) x link at scale 1)``, summed over the MoE
layers. The default share is the one the analytical model gives the same layers on the
plan's cluster (the GPU's), so the replay sees the exchanges as large, relative to
compute, as the plan's GPUs would. The table the re-prediction uses is measured again
after the timed steps ([Note: table around the steps] in ``worker``), so the report
gives the share realised in it beside the share asked for.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from planner.core.costs import CostTable, LayerCost
from planner.core.plan import Plan

__all__ = ["emulated_links", "link_table", "bytes_factor", "LINK_LABEL", "gpu_share", "link_options",
           "share_of_moe_time"]

LINK_LABEL = "EMULATED expert-parallel link: all-to-alls are local copies held to the analytical model's time"


def _analytical(plan: Plan) -> CostTable:
    """The analytical cost table of ``plan``'s model on ``plan``'s cluster and parallelism."""
    from planner.core.cluster import cluster_from_dict
    from planner.core.hf_config import load_model
    from profiler.analytical import analytical_costs

    par = {k: plan.parallel[k] for k in ("pp", "tp", "ep", "dp") if k in plan.parallel}
    cluster = cluster_from_dict({**plan.cluster, "parallel": {**plan.cluster.get("parallel", {}), **par}})
    return analytical_costs(load_model(str(plan.model["name"])), cluster)


def bytes_factor(plan: Plan, rm: Any, full_hidden: int) -> float:
    """Replay all-to-all bytes over the plan's: (hidden x tokens per microbatch) of the
    replayed model ``rm`` over the plan's, ``full_hidden`` being the plan's hidden size."""
    plan_seq = int(plan.costs.get("seq_len") or plan.cluster.get("training", {}).get("seq_len") or rm.seq_len)
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
    pair (``planner.replay.costs`` [Note: pairs measured here]; the full-backward
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
