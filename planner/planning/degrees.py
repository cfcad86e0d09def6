"""Search over parallel degrees for N GPUs: tp, pp, vpp, ep, cp, dp and micro-batch size.

1. Enumerate: tp in powers of two up to the NVLink domain dividing the attention heads
   (TP beyond a node pays the network on every layer: Megatron-LM guidance, Narayanan et
   al. 2021 section 3.2); cp in {1, 2, 4} only for sequences of 16K tokens and more
   (context parallelism is for long context: Megatron-Core context_parallel docs); pp a
   divisor of N / (tp x cp) leaving every stage a layer; vpp in {1, 2, 4} with pp > 1;
   ep a power of two dividing the expert count and dp x cp x tp; micro-batch 1, 2, 4
   dividing the per-replica batch (with vpp > 1 into a multiple of pp microbatches: the
   interleaved schedule's rule); dp = N / (pp x tp x cp).
2. Drop combinations whose weights, gradients and optimizer state alone exceed the memory
   limit; screen the rest with the closed-form estimate (``planner.planning.estimate``,
   serial costs, the cheapest recomputation mode that fits), keep those that fit memory.
3. Re-estimate the best ``RESCREEN`` with EP overlap (pair costs) and rank them.
The caller (``planner.api.plan(..., gpus=N)``) plans the best few fully and keeps the
fastest; ``why`` says what made the winner win over the runner-up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.core.cluster import ClusterSpec, ParallelSpec
from planner.core.errors import InputError
from planner.core.layer_math import layer_params
from planner.core.model import ModelSpec
from planner.planning.estimate import ScreenWork, StepEstimate, estimate_step

__all__ = ["DegreeChoice", "search_degrees", "why_first", "degree_table"]

RESCREEN = 40
"""Candidates re-estimated with EP overlap pair costs after the serial screen."""


@dataclass(frozen=True, kw_only=True)
class DegreeChoice:
    """One parallel configuration and its estimate."""

    cluster: ClusterSpec
    """The cluster with these degrees."""
    estimate: StepEstimate
    """Its closed-form estimate."""

    @property
    def label(self) -> str:
        p, t = self.cluster.parallel, self.cluster.training
        return f"tp{p.tp} pp{p.pp} vpp{p.vpp} ep{p.ep} cp{p.cp} dp{p.dp} mbs{t.micro_batch_size}"


def _pow2(limit: int) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]


def _heads(model: ModelSpec) -> int:
    for spec in (model.attention, model.mla):
        if spec is not None:
            return spec.num_heads
    return 1


def _candidates(model: ModelSpec, base: ClusterSpec, gpus: int):
    tr = base.training
    cps = [c for c in (1, 2, 4) if tr.seq_len >= 16384 and tr.seq_len % c == 0] or [1]
    for tp in [t for t in _pow2(base.gpus_per_node) if _heads(model) % t == 0]:
        for cp in cps:
            if gpus % (tp * cp):
                continue
            rest = gpus // (tp * cp)
            for pp in [d for d in range(1, rest + 1) if rest % d == 0 and d <= model.num_layers]:
                dp = rest // pp
                eps = [1] if model.moe is None else [e for e in _pow2(model.moe.num_experts)
                                                     if model.moe.num_experts % e == 0 and (dp * cp * tp) % e == 0]
                for vpp in [v for v in (1, 2, 4) if (v == 1 or pp > 1) and pp * v <= model.num_layers]:
                    for ep in eps:
                        for mbs in (1, 2, 4):
                            if tr.global_batch % (dp * mbs):
                                continue
                            if vpp > 1 and (tr.global_batch // (dp * mbs)) % pp:
                                continue  # interleaved 1F1B needs microbatches divisible by pp (Megatron)
                            yield replace(base, num_gpus=gpus,
                                          parallel=ParallelSpec(pp=pp, vpp=vpp, tp=tp, ep=ep, dp=dp, cp=cp),
                                          training=replace(tr, micro_batch_size=mbs))


def search_degrees(model: ModelSpec, base: ClusterSpec, gpus: int, *, top: int = 10) -> list[DegreeChoice]:
    """The ``top`` memory-feasible configurations of ``gpus`` GPUs, fastest first."""
    if gpus < 1:
        raise InputError("--gpus", f"must be >= 1, got {gpus}")
    screened, screen = [], ScreenWork()
    for c in _candidates(model, base, gpus):
        if _static_bytes(model, c) > c.memory_limit_bytes:
            continue
        for mode in c.training.recompute_modes():  # cheapest mode that fits
            est = estimate_step(model, c.with_recompute(mode), overlap=False, screen=screen)
            if est.fits:
                screened.append(DegreeChoice(cluster=c, estimate=est))
                break
    if not screened:
        raise InputError("--gpus", f"no tp/pp/vpp/ep/cp/dp/micro-batch combination of {gpus} GPUs fits "
                         f"{model.name} in {base.memory_limit_bytes / 2**30:.1f} GiB per GPU",
                         "use more GPUs, a GPU with more memory, or a smaller global batch")
    screened.sort(key=lambda d: (d.estimate.step_s, d.label))
    rescored = [DegreeChoice(cluster=d.cluster, estimate=estimate_step(model, d.cluster, screen=screen))
                for d in screened[:RESCREEN]]
    rescored = [d for d in rescored if d.estimate.fits]
    rescored.sort(key=lambda d: (d.estimate.step_s, d.label))
    return rescored[:top]


def _static_bytes(model: ModelSpec, c: ClusterSpec) -> float:
    """Weights, gradients and optimizer state of the average pipeline rank (a lower bound
    on the busiest rank's), bytes: the prefilter before any cost table."""
    p, t = c.parallel, c.training
    params = [layer_params(layer, model) for layer in model.layers]
    dense = sum(x.dense for x in params) / (p.tp * p.pp)
    expert = sum(x.expert for x in params) / (p.ep * p.etp * p.pp)
    edp = max(p.dp * p.cp * p.tp // (p.ep * p.etp), 1)
    shard = t.distributed_optimizer or t.fsdp
    weights = 6 * (dense / (p.dp * p.cp) + expert / edp if t.fsdp else dense + expert)
    return weights + 12 * (dense / (p.dp * p.cp if shard else 1) + expert / (edp if shard else 1))


def why_first(ranked: list[DegreeChoice]) -> str:
    """One sentence: why the first configuration beats the second."""
    if len(ranked) < 2:
        return "the only memory-feasible configuration"
    a, b = ranked[0].estimate, ranked[1].estimate
    parts = {"pipeline bubble": b.bubble_s - a.bubble_s,
             "exposed data-parallel traffic": b.dp_exposed_s - a.dp_exposed_s,
             "optimizer step": b.optimizer_s - a.optimizer_s}
    parts["per-microbatch compute and communication"] = (b.step_s - a.step_s) - sum(parts.values())
    key = max(parts, key=parts.get)
    return (f"{ranked[0].label} beats {ranked[1].label} by {(b.step_s / a.step_s - 1) * 100:.1f}% of step time, "
            f"mostly less {key} ({parts[key] * 1e3:.0f} ms)")


def degree_table(ranked: list[DegreeChoice]) -> list[dict]:
    """Rows for the ranked table (JSON-ready)."""
    return [{"rank": i + 1, "tp": d.cluster.parallel.tp, "pp": d.cluster.parallel.pp,
             "vpp": d.cluster.parallel.vpp, "ep": d.cluster.parallel.ep, "cp": d.cluster.parallel.cp,
             "dp": d.cluster.parallel.dp, "mbs": d.cluster.training.micro_batch_size,
             "recompute": d.estimate.recompute, "ep_overlap": d.estimate.overlap,
             "tokens_per_s_per_gpu": round(d.estimate.tokens_per_s_per_gpu, 1),
             "mfu": round(d.estimate.mfu, 4), "step_s": round(d.estimate.step_s, 4),
             "peak_memory_gib": round(d.estimate.peak_memory_bytes / 2**30, 2)}
            for i, d in enumerate(ranked)]
