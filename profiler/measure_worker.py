"""What each profiling process runs: comm benchmarks, one layer per type, every type pair.

One process per rank (``profiler.measure_launch`` starts them). The ranks form
expert-parallel groups of ``ep`` (``ep_groups``: ranks [g*ep, (g+1)*ep) are group g; one
process each at ``ep == 1``, all experts local). Inside a group the ranks build their share
of every MoE layer and measure in lockstep (the all-to-alls are real); every group measures
its own copy of the same layers at the same time. Results are gathered on rank 0, which
keeps the slowest rank's numbers inside a group (the straggler sets the pace) and pools the
samples across groups (``_merge_groups``). With ``ep == 1`` every rank measures at once
(``concurrent``, the default); with ``concurrent`` off rank 0 measures alone and rank 1
only joins the point-to-point benchmark. The link benchmarks run on the first
``link_ranks`` ranks whatever the number of groups, so their fits keep one group's meaning.

[Note: concurrent ranks] A replay's ranks all compute at once, on a CPU on cores that
share the memory bandwidth, the last-level cache and the clock. Measured alone, with the
other core idle, the memory-bound layers of a pp 2 replay (the embedding's gradient, the
head's logits) ran faster than the replay's trace of them round after round (figures:
docs/trace-import.md, "Rounds"); so by default every profiling process measures, as
every replay rank computes.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch
import torch.distributed as dist

from planner.core.model import LayerSpec, ModelSpec
from profiler.comm import LinkFit, all_to_all_benchmark, p2p_benchmark
from profiler.layers import build_layer, layer_input, loss_fn
from profiler.layers.moe_capacity import CapacityMode
from profiler.measure import LayerSampler, LayerTiming, measure_layers
from profiler.pairs import PairTiming, measure_pair
from profiler.timing import Clock, Stat, pooled

__all__ = ["WorkerConfig", "WorkerResult", "BuiltTypes", "profile_rank", "measure_types", "representatives",
           "measuring_processes", "ep_groups", "link_ranks"]

_TIMED = ("f", "i", "w", "b", "a2a_f", "a2a_b")
"""The ``LayerTiming`` fields that are timings (merged per rank as ``Stat``)."""


def measuring_processes(ep: int, concurrent: bool, world: int) -> int:
    """How many of ``world`` processes measure (ranks 0..n-1): all of an expert-parallel
    group, all with ``concurrent`` ([Note: concurrent ranks]), else rank 0 alone."""
    return world if ep > 1 or concurrent else 1


def ep_groups(ep: int, world: int) -> list[list[int]]:
    """The expert-parallel groups of ``world`` ranks: ranks [g*ep, (g+1)*ep) form group g (at
    ``ep == 1`` one process each, all experts local). The one owner of group membership: the
    workers build their process groups and rank 0 merges their results by it."""
    return [list(range(g, min(g + ep, world))) for g in range(0, world, ep)]


def link_ranks(ep: int, world: int) -> int:
    """How many ranks (0..n-1) run the link benchmarks: the first expert-parallel group, at
    least the two the point-to-point ping-pong needs, so that the all-to-all fit is one
    group's of ``ep`` ranks however many groups measure."""
    return min(world, max(ep, 2))


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """Settings every profiling process receives."""

    model: ModelSpec
    """Full-size model spec."""
    scale: float
    """Width scale of the modules."""
    ep: int
    """Expert-parallel group size (ranks per group; the groups are ``ep_groups``)."""
    device: str
    """cpu or cuda."""
    seq_len: int
    """Tokens per sequence."""
    micro_batch: int
    """Sequences per microbatch."""
    warmup: int
    """Untimed runs before the timed ones."""
    repeats: int
    """Timed runs (median and spread)."""
    seed: int
    """Weights and inputs seed."""
    threads: int
    """torch intra-op threads per process."""
    pairs: bool = True
    """Measure overlapped pairs."""
    timeout_s: float = 600.0
    """Collective timeout."""
    moe_capacity: CapacityMode | None = None
    """Megatron's capacity mode of the MoE layers (None: dropless)."""
    modules: str = "native"
    """Where the layer modules come from: native (``profiler.layers``) or transformers
    (``profiler.hf``)."""
    raw_config: dict[str, Any] | None = None
    """The model's config.json, parsed (needed when ``modules`` is transformers)."""
    concurrent: bool = True
    """With ``ep == 1``, every process measures at once ([Note: concurrent ranks]);
    False: rank 0 alone."""


@dataclass(frozen=True, kw_only=True)
class WorkerResult:
    """What rank 0 returns."""

    layers: dict[str, LayerTiming]
    """Timing per layer type (slowest rank of a group, pooled over the groups)."""
    pairs: dict[tuple[str, str], PairTiming] = field(default_factory=dict)
    """Overlapped and serial time per (forward type, backward type), merged as ``layers``."""
    p2p: LinkFit | None = None
    """Point-to-point fit (None with one process)."""
    a2a: LinkFit | None = None
    """All-to-all fit over the first ``link_ranks`` ranks, one group (None with one process)."""
    device_name: str = ""
    """What measured (cpu or the GPU's name)."""


def representatives(model: ModelSpec) -> dict[str, LayerSpec]:
    """The first layer of each type, in order of appearance."""
    reps: dict[str, LayerSpec] = {}
    for layer in model.layers:
        reps.setdefault(layer.type_key, layer)
    return reps


def _loss_for(layer: LayerSpec, x: torch.Tensor, vocab: int) -> Callable | None:
    if layer.role != "head":
        return None
    n = x.shape[0] * x.shape[1]
    targets = (torch.arange(n, device=x.device) * 7919 % vocab).view(x.shape[:2])
    return lambda logits: loss_fn(logits, targets)


def profile_rank(rank: int, world: int, port: int, cfg: WorkerConfig,
                 report: Callable[[str], None]) -> WorkerResult | None:
    """Profile on this rank; rank 0 returns the merged result, others None."""
    torch.set_num_threads(cfg.threads)
    device = torch.device("cuda", rank) if cfg.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    p2p = a2a = None
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=cfg.timeout_s))
        p2p, a2a = _links(rank, world, cfg.ep, device)
        report("comm")
    group = _ep_group(rank, cfg.ep, world)
    measures = rank < measuring_processes(cfg.ep, cfg.concurrent, world)
    mine = _measure(rank, cfg, device, group, report) if measures else None
    if world > 1:
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, mine)
        mine = _merge_groups(gathered, ep_groups(cfg.ep, world))
    if rank != 0:
        return None
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return WorkerResult(layers=mine[0], pairs=mine[1], p2p=p2p, a2a=a2a, device_name=name)


def _subgroup(ranks: list[int], world: int) -> Any:
    """A process group of ``ranks``: the default group when it is every rank, else a new one
    (every rank of the default group must make it, in the same order)."""
    return dist.group.WORLD if len(ranks) == world else dist.new_group(ranks)


def _links(rank: int, world: int, ep: int, device: torch.device) -> tuple[LinkFit | None, LinkFit | None]:
    """The point-to-point fit (ranks 0 and 1) and the all-to-all fit on the first
    ``link_ranks`` ranks, the others waiting; then every rank meets at a barrier, so that all
    groups start measuring together."""
    n = link_ranks(ep, world)
    group = _subgroup(list(range(n)), world)
    p2p = p2p_benchmark(device=device)
    a2a = all_to_all_benchmark(device=device, group=group) if rank < n else None
    dist.barrier()
    return p2p, a2a


def _ep_group(rank: int, ep: int, world: int) -> Any:
    """This rank's expert-parallel process group (None at ``ep == 1``: all experts local)."""
    if ep == 1:
        return None
    handles = [(ranks, _subgroup(ranks, world)) for ranks in ep_groups(ep, world)]
    return next(h for ranks, h in handles if rank in ranks)


@dataclass(frozen=True, kw_only=True)
class BuiltTypes:
    """One module, input and loss per layer type, as the measurements used them."""

    modules: dict[str, Any]
    """Layer type -> module (on the device)."""
    inputs: dict[str, torch.Tensor]
    """Layer type -> sample input."""
    losses: dict[str, Callable | None]
    """Layer type -> loss on its output (the head's), else None."""


def measure_types(cfg: WorkerConfig, device: torch.device, group: Any, report: Callable[[str], None], *,
                  rank: int = 0) -> tuple[dict[str, LayerTiming], dict, BuiltTypes]:
    """Every layer type of ``cfg.model`` timed alone (repeats in rounds: ``measure_layers``),
    then every type pair overlapped (when ``cfg.pairs``); ``group``: the expert-parallel
    group (a process group, an ``EmulatedLink``, or None for all experts local)."""
    clock = Clock(device)
    reps = representatives(cfg.model)
    mods, inputs, losses = {}, {}, {}
    for t, layer in reps.items():
        mods[t] = _build(cfg, layer, group).to(device)
        inputs[t] = layer_input(cfg.model, layer, scale=cfg.scale, batch=cfg.micro_batch,
                                seq_len=cfg.seq_len, seed=cfg.seed + 7 * rank, device=device)
        vocab = mods[t].lm_head.out_features if layer.role == "head" else 0
        losses[t] = _loss_for(layer, inputs[t], vocab)
    samplers = {t: LayerSampler(mods[t], inputs[t], loss=losses[t], seed=cfg.seed) for t in reps}
    timings = measure_layers(samplers, clock=clock, warmup=cfg.warmup, repeats=cfg.repeats,
                             done=lambda t: report(f"layer {t}"))
    pairs = {}
    if cfg.pairs:
        for ta in reps:
            for tb in reps:
                # no warm-up: every module already ran in its single-layer measurement
                pairs[(ta, tb)] = measure_pair(mods[ta], inputs[ta], mods[tb], inputs[tb], clock=clock,
                                               warmup=0, repeats=cfg.repeats,
                                               loss_a=losses[ta], loss_b=losses[tb], seed=cfg.seed)
                report(f"pair {ta} / {tb}")
    return timings, pairs, BuiltTypes(modules=mods, inputs=inputs, losses=losses)


def _build(cfg: WorkerConfig, layer: LayerSpec, group: Any) -> torch.nn.Module:
    if cfg.modules == "transformers":
        from profiler.hf import build_hf_layer

        return build_hf_layer(cfg.model, layer, raw=cfg.raw_config, scale=cfg.scale, ep_group=group,
                              seed=cfg.seed)
    return build_layer(cfg.model, layer, scale=cfg.scale, ep_group=group, seed=cfg.seed,
                       moe_capacity=cfg.moe_capacity)


def _measure(rank: int, cfg: WorkerConfig, device: torch.device, group: Any,
             report: Callable[[str], None]):
    timings, pairs, _ = measure_types(cfg, device, group, report, rank=rank)
    return timings, pairs


def _slowest(stats: list[Stat]) -> Stat:
    return max(stats, key=lambda s: s.median)


def _merge(results: list[tuple[dict[str, LayerTiming], dict]], *, lockstep: bool):
    """``lockstep`` (one expert-parallel group): slowest rank per timing, summed token counts,
    largest memory. Otherwise the ranks measured copies of the same layers side by side:
    every timing pooled over the ranks (``pooled``), the rest rank 0's."""
    if len(results) == 1:
        return results[0]
    if not lockstep:
        return _pool(results)
    layers = {}
    for t, first in results[0][0].items():
        per = [r[0][t] for r in results]
        tpe = tuple(sum(c) for c in zip(*(p.tokens_per_expert for p in per)))
        layers[t] = replace(
            first, **{k: _slowest([getattr(p, k) for p in per]) for k in _TIMED},
            expert=tuple(max(p.expert[k] for p in per) for k in range(4)),
            a2a_bytes=max(p.a2a_bytes for p in per), tokens_per_expert=tpe,
            act_bytes=max(p.act_bytes for p in per), act_w_bytes=max(p.act_w_bytes for p in per),
            param_bytes=max(p.param_bytes for p in per))
    pairs = {k: max((r[1][k] for r in results), key=lambda p: p.ov.median) for k in results[0][1]}
    return layers, pairs


def _merge_groups(gathered: list, groups: list[list[int]]):
    """Each expert-parallel group's ranks merged in lockstep, then the groups pooled (they
    measured copies of the same layers side by side). ``gathered``: per rank its
    measurement, None where the rank did not measure."""
    per_group = [[gathered[r] for r in ranks if gathered[r] is not None] for ranks in groups]
    return _merge([_merge(g, lockstep=True) for g in per_group if g], lockstep=False)


def _pool(results: list[tuple[dict[str, LayerTiming], dict]]):
    """Each timing's samples of every rank in one ``Stat``; memory and token counts rank 0's
    (every rank ran the same shapes), the routed-expert medians averaged."""
    layers = {}
    for t, first in results[0][0].items():
        per = [r[0][t] for r in results]
        layers[t] = replace(first, **{k: pooled([getattr(p, k) for p in per]) for k in _TIMED},
                            expert=tuple(sum(p.expert[k] for p in per) / len(per) for k in range(4)))
    pairs = {}
    for k, first in results[0][1].items():
        per = [r[1][k] for r in results]
        pairs[k] = replace(first, **{f: pooled([getattr(p, f) for p in per])
                                     for f in ("ov", "serial", "ratio", "hidden")})
    return layers, pairs
