"""A cost table measured on this device, at the replay's width, by the runtime's own code.

Used to re-predict a plan that was made for other hardware: each layer type is built
once (``profiler.layers``) and timed as the pipeline runtime runs it, one microbatch
at a time: F = forward (plus the loss for the head); I and W = torch's
``stage_backward_input`` and ``stage_backward_weight``, the functions
``_PipelineScheduleRuntime`` calls for I and W; B = the full backward it calls for B
(``LayerCost.b``: split I + W costs more than one full backward, see
``planner.core.costs`` [Note: full backward]). Every rank measures at once, so the
cores are as busy as during the replay, and the medians are averaged over ranks.

[Note: link path] A replay with the emulated link runs every MoE layer through the
exchange path (local copies, the counts exchange) even where the link takes no time;
on 2 CPU cores that path costs about 13% of a stage's F and 11% of its B at 1/32 width
(26 Qwen3-Next layers alone: F 0.114 s against 0.097-0.104 s without it). So such a
replay's table is timed with a zero-time ``EmulatedLink`` (the link's own time is added
by ``planner.replay.link``), not with every expert local.

Pipeline send/receive is measured too: a ping-pong between ranks 0 and 1 with a
1-element tensor (latency) and with one stage-boundary activation (bandwidth).
No pair (OVERLAP) costs are recorded, so a fused pair is re-predicted as its two halves
one after the other. The replay runs it with the overlap runtime (``planner.runtime``,
registered by ``fused_pairs``): the two halves run concurrently and take turns at each
MoE all-to-all, so a pair hides only the all-to-alls, and with every expert local
(``--ep 1``, this table's setting) there are none: serial is what it costs. With an
emulated link the replay adds the link's times to this table and the hiding of the plan's
fused pair types, measured through that link (``planner.replay.link`` [Note: re-prediction
with the link], ``planner.replay.pairs_here``); hiding with ``--ep > 1``
is measured by ``benchmarks/overlap.py``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from planner.core.costs import CostTable, LayerCost, P2PCost
from planner.core.layer_math import layer_forward_flops
from planner.replay.manual_gc import collector_off
from planner.replay.model import ReplayModel, build_stage, loss_fn
from planner.replay.timing import Clock

__all__ = ["measure_layer_costs", "measure_p2p", "first_of_type", "layer_module", "sampler"]


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


def sampler(rm: ReplayModel, k: int, module: Any, device: torch.device):
    """``forward() -> (input, output or loss, output gradients or None)`` of one microbatch
    through layer ``k``'s ``module``: token ids into the embedding, random activations
    elsewhere, the loss after the head (``None`` gradients: the loss is the root)."""
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


def _time_layer(rm: ReplayModel, k: int, device: torch.device, clock: Clock,
                reps: int, recompute: str = "none", ep_group: Any = None) -> tuple[float, float, float, float]:
    """Median (F, I, W, B) seconds of layer ``k`` for one microbatch, recomputing as
    ``recompute`` says, its MoE exchanging over ``ep_group`` ([Note: link path])."""
    module = layer_module(rm, k, device, recompute, ep_group)
    forward = sampler(rm, k, module, device)
    with collector_off():  # as in the timed steps ([Note: manual gc] in planner.replay.manual_gc)
        samples = [_layer_sample(module, forward, clock) for _ in range(reps + 2)][2:]  # 2 warm-ups
    return tuple(statistics.median(s[j] for s in samples) for j in range(4))  # type: ignore[return-value]


def _layer_sample(module: Any, forward: Any, clock: Clock) -> tuple[float, float, float, float]:
    """One (F, I, W, B) sample of a one-layer module."""
    t0 = clock.mark()
    x, out, grads = forward()
    t1 = clock.mark()
    if x.requires_grad:
        _, groups = stage_backward_input([out], grads, [x], module.parameters())
        t2 = clock.mark()
        stage_backward_weight(module.parameters(), groups)
    else:  # token ids: torch's first stage skips I and runs the full backward as W
        t2 = clock.mark()
        torch.autograd.backward([out], grads)
    t3 = clock.mark()
    x, out, grads = forward()
    t4 = clock.mark()
    torch.autograd.backward([out], grads)  # B: torch's stage_backward is autograd.backward
    t5 = clock.mark()
    module.zero_grad(set_to_none=True)
    sec = clock.seconds
    return sec(t0, t1), sec(t1, t2), sec(t2, t3), sec(t4, t5)


def measure_layer_costs(rm: ReplayModel, device: torch.device, clock: Clock, *,
                        label: str, reps: int = 5, recompute: str = "none", ep_group: Any = None) -> CostTable:
    """Per-layer F, I, W, B measured here (one layer per type, averaged over ranks), the
    layers recomputing as ``recompute`` says (a full recomputation's backward runs the
    forward again, which a re-prediction of such a plan must count) and exchanging over
    ``ep_group`` as the replay's do ([Note: link path])."""
    first = first_of_type(rm)
    keys = list(first)
    times = torch.tensor([_time_layer(rm, first[t], device, clock, reps, recompute, ep_group) for t in keys],
                         dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(times)
        times /= dist.get_world_size()
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


def _pingpong(rank: int, nbytes: int, device: torch.device, reps: int) -> float:
    """One-way seconds for ``nbytes`` between ranks 0 and 1 (median of round trips / 2)."""
    buf = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=device)
    times = []
    for _ in range(reps):
        t0 = _now(device)
        if rank == 0:
            dist.send(buf, 1)
            dist.recv(buf, 1)
        else:
            dist.recv(buf, 0)
            dist.send(buf, 0)
        times.append((_now(device) - t0) / 2)
    return statistics.median(times)


def _now(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def measure_p2p(rank: int, nbytes: int, device: torch.device, *, reps: int = 20) -> P2PCost:
    """Latency and bandwidth of one pipeline message, measured between ranks 0 and 1."""
    result = torch.zeros(2, dtype=torch.float64)
    if rank in (0, 1):
        small = _pingpong(rank, 4, device, reps)
        large = _pingpong(rank, nbytes, device, reps)
        result[0], result[1] = small, max(large - small, 1e-9)
    obj: list[Any] = [result.tolist()]
    dist.broadcast_object_list(obj, src=0)
    latency, extra = obj[0]
    return P2PCost(latency_s=latency, bandwidth=nbytes / extra)
