"""The cost table a re-prediction uses: layers, fused pairs and the pipeline message, timed
here through the profiler's timers on layers built as the replay builds them.

Used to re-predict a plan made for other hardware (``planner.replay.predict``). Each layer
type is built once, as the replay's stages build it (``build_stage``: its MoE exchanging
over the replay's group or link, recomputing as the plan does), and timed as the pipeline
runtime calls it (``profiler.measure.time_layer_calls``: F, torch's I and W, the full
backward B, ``planner.core.costs`` [Note: full backward]). Every rank measures at once, so
the cores are as busy as during the replay, and the medians are averaged over ranks. The
pipeline message is ``profiler.comm.p2p_cost`` between ranks 0 and 1.

[Note: link path] A replay with the emulated link runs every MoE layer through the
exchange path (local copies, the counts exchange) even where the link takes no time, and
on CPU that path takes a share of a stage's F and B of its own. So such a replay's table is
timed with a zero-time ``EmulatedLink`` (the link's own time is added by
``planner.replay.link``), not with every expert local.

[Note: pairs measured here] A fused pair hides what the overlap runtime (``planner.runtime``)
manages to hide on this machine, which need not be what the planner's overlap model
(``profiler.overlap_dag``, built for a GPU with two streams) says: the runtime computes one
half at a time and hands over only at the all-to-alls, and under ``recompute: full`` the
backward half has four exchanges per MoE layer to the forward's two. For each (forward
layer type, backward layer type) that a fused action of the plan puts side by side
(``planner.core.stage_costs.fused_range_cost``: F of the j-th forward layer beside the
backward of the j-th layer from the end), one layer of each type is built as above and
timed alone and fused through ``planner.runtime.baton.run_pair``
(``profiler.pairs.time_pair_calls``). The seconds the pair hides (median of the paired
differences alone - fused, averaged over ranks) replace the carried-over share
(``planner.replay.link`` [Note: re-prediction with the link]); negative when the two halves
cost more fused than alone. Without the emulated link (``--ep 1``) a pair has no all-to-all
to hide and is re-predicted as its two halves one after the other; hiding with ``--ep > 1``
is measured by ``benchmarks/overlap.py``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.pipelining._backward import stage_backward_input

from planner.core.costs import CostTable, LayerCost
from planner.core.layer_math import layer_forward_flops
from planner.core.plan import Plan
from planner.core.schedule import OVERLAP, ActionKind
from planner.replay.model import ReplayModel, build_stage, loss_fn
from profiler.measure import Sample, time_layer_calls
from profiler.pairs import time_pair_calls
from profiler.timing import Clock

__all__ = ["measure_layer_costs", "first_of_type", "layer_module", "sampler", "fused_type_pairs",
           "measure_hidden", "PairKey"]

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
    """Median (F, I, W, B) seconds of layer ``k`` built as the replay builds it."""
    module = layer_module(rm, k, device, recompute, ep_group)
    return time_layer_calls(module, sampler(rm, k, module, device), clock, repeats=reps)


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
