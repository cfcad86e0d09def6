"""Closed-form step estimate of one parallel configuration (the degree search's screen).

From the analytical cost table (``profiler.analytical``):

1. Partition: the layers (embedding and head included) split into pp x vpp contiguous
   stages minimising the largest stage (binary search on the bound); stage s goes to
   rank s mod pp (interleaved "loop" placement, Megatron).
2. A rank's time per microbatch: serial F + I + W + all-to-alls of its stages, or with EP
   overlap each stage's steady pairs ``sum_j OV[s+j, e-1-j] + W`` (design: Megatron
   pairs F.layer[0] with B.layer[last]), plus one activation send and one gradient send
   per chunk over the pipeline link.
3. Pipeline: ``M x t_max + (pp - 1) / vpp x t_serial_max`` (interleaved 1F1B bubble,
   Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
   Clusters", section 2.2.2; warm-up and cool-down run serially); ``flushes`` separate
   pipeline schedules per optimizer step (gradient accumulation outside the schedule)
   each pay it.
4. Data parallelism, the optimizer, MFU and tokens/s: ``planner.planning.prediction.predict``,
   the one prediction every plan and benchmark reports.
5. Peak memory per rank: its stages' weights, gradients and optimizer state plus
   in-flight activations: Megatron's interleaved schedule keeps ``(pp - r - 1) x 2 +
   (vpp - 1) x pp + 1`` chunk-microbatches alive on rank r (1F1B: ``pp - r``); EP overlap
   (combined 1F1B) one more when pp > 1; the peak is the largest over ranks.

The full planner (``planner.planning``) refines partition and schedule; this estimate
only ranks degrees before it (``planner.planning.degrees``). Published runs are compared
with what ``ppplan plan`` predicts (``benchmarks/published.py``), not with this screen.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.cluster import ClusterSpec
from planner.core.costs import CostTable
from planner.core.model import ModelSpec
from planner.planning.prediction import predict
from profiler.analytical import analytical_costs
from profiler.cost_model.calibration import Calibration, active_calibration

__all__ = ["StepEstimate", "estimate_step", "even_partition"]


@dataclass(frozen=True, kw_only=True)
class StepEstimate:
    """Predicted step of one configuration."""

    step_s: float
    """Optimizer-step time, seconds."""
    tokens_per_s_per_gpu: float
    """Global batch tokens / step time / GPUs."""
    mfu: float
    """Model FLOPs (PaLM convention) / (step x GPUs x BF16 peak)."""
    peak_memory_bytes: int
    """Largest per-GPU memory over pipeline ranks."""
    fits: bool
    """Peak memory within the cluster's limit."""
    pipeline_s: float
    """Forward/backward schedule time (all flushes)."""
    bubble_s: float
    """Pipeline fill/drain in it."""
    dp_exposed_s: float
    """Data-parallel communication not hidden."""
    optimizer_s: float
    """Adam step."""
    recompute: str
    """Recomputation mode estimated."""
    overlap: bool
    """EP all-to-all overlap (combined 1F1B) assumed."""


def even_partition(costs: list[float], stages: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) ranges, ``stages`` of them, minimising the largest sum."""
    lo, hi = max(costs), sum(costs)
    for _ in range(50):
        mid = (lo + hi) / 2
        if len(_greedy(costs, mid, stages)) <= stages:
            hi = mid
        else:
            lo = mid
    bounds = _greedy(costs, hi, stages)
    while len(bounds) < stages:  # split the longest range until every stage has a layer
        i = max(range(len(bounds)), key=lambda j: bounds[j][1] - bounds[j][0])
        s, e = bounds[i]
        bounds[i:i + 1] = [(s, s + (e - s) // 2), (s + (e - s) // 2, e)]
    return bounds


def _greedy(costs: list[float], cap: float, stages: int) -> list[tuple[int, int]]:
    bounds, start, acc = [], 0, 0.0
    for i, c in enumerate(costs):
        if acc + c > cap and i > start and len(bounds) < stages:
            bounds.append((start, i))
            start, acc = i, 0.0
        acc += c
    bounds.append((start, len(costs)))
    return bounds


def _stage_time(t: CostTable, s: int, e: int, overlap: bool) -> float:
    if not overlap:
        return sum(lc.f + lc.i + lc.w + lc.a2a_f + lc.a2a_b for lc in t.layers[s:e])
    pairs = sum(t.ov(s + j, e - 1 - j) for j in range(e - s))
    return pairs + sum(lc.w for lc in t.layers[s:e])


def _one(model: ModelSpec, cluster: ClusterSpec, t: CostTable, overlap: bool, flushes: int) -> StepEstimate:
    par, tr = cluster.parallel, cluster.training
    stages = par.pp * par.vpp
    bounds = even_partition([lc.f + lc.i + lc.w + lc.a2a_f + lc.a2a_b for lc in t.layers], stages)
    serial = [_stage_time(t, s, e, False) for s, e in bounds]
    steady = [_stage_time(t, s, e, overlap) for s, e in bounds]
    p2p = 2 * par.vpp * t.p2p.time(t.layers[0].out_bytes) if stages > 1 else 0.0  # send F and B per chunk
    rank_t = [sum(steady[r::par.pp]) + p2p for r in range(par.pp)]
    rank_serial = [sum(serial[r::par.pp]) for r in range(par.pp)]
    m = max(1, tr.global_batch // (par.dp * tr.micro_batch_size * flushes))
    bubble = (par.pp - 1) / par.vpp * max(rank_serial)
    pipeline = flushes * (m * max(rank_t) + bubble)
    peaks = [int(_rank_memory(t, bounds, r, par.pp, par.vpp, m, overlap)) for r in range(par.pp)]
    compute = [sum(lc.f + lc.i + lc.w for s, e in bounds[r::par.pp] for lc in t.layers[s:e]) for r in range(par.pp)]
    pred = predict(model, cluster, step_time_s=pipeline, peak_memory_bytes=peaks,
                   microbatch_compute_s=max(compute), microbatches=m * flushes)  # as a plan's (dp_step)
    peak = max(peaks)
    return StepEstimate(step_s=pred.optimizer_step_time_s, tokens_per_s_per_gpu=pred.tokens_per_s_per_gpu,
                        mfu=pred.mfu, peak_memory_bytes=peak, fits=peak <= cluster.memory_limit_bytes,
                        pipeline_s=pipeline, bubble_s=flushes * bubble, dp_exposed_s=pred.dp_exposed_s,
                        optimizer_s=pred.optimizer_s, recompute=tr.recompute, overlap=overlap)


def _rank_memory(t: CostTable, bounds, r: int, pp: int, vpp: int, m: int, overlap: bool) -> float:
    mine = bounds[r::pp]
    static = sum(lc.static_bytes for s, e in mine for lc in t.layers[s:e])
    static += max((lc.work_bytes for s, e in mine for lc in t.layers[s:e]), default=0)
    act = sum(lc.act_bytes for s, e in mine for lc in t.layers[s:e]) / vpp
    warm = (pp - r - 1) * 2 + (vpp - 1) * pp if vpp > 1 else pp - r - 1
    # EP overlap pairs F of layer j (microbatch i+1) with B of layer L-1-j (microbatch i), so
    # the two together hold about one microbatch; with pp > 1 Megatron adds one warm-up chunk
    chunks = min(warm + 1 + (1 if overlap and pp > 1 else 0), m * vpp)
    return static + chunks * act


def estimate_step(model: ModelSpec, cluster: ClusterSpec, *, overlap: bool | None = None,
                  flushes: int = 1, calibration: Calibration | None = None,
                  tables: dict | None = None) -> StepEstimate:
    """Best estimate over the cluster's recomputation modes (fastest that fits, else the
    smallest) and, with ``overlap=None`` and ep > 1, with and without EP overlap.
    ``tables`` memoises cost tables across calls (a table does not depend on vpp, nor on pp
    beyond whether it is 1)."""
    calibration = calibration or active_calibration()
    overlaps = (overlap,) if overlap is not None else ((False, True) if cluster.parallel.ep > 1 else (False,))
    found = []
    for mode in cluster.training.recompute_modes():
        c = cluster.with_recompute(mode)
        table = _table_for(model, c, calibration, any(overlaps), {} if tables is None else tables)
        found += [_one(model, c, table, ov, flushes) for ov in overlaps]
    fitting = [e for e in found if e.fits]
    if fitting:
        return min(fitting, key=lambda e: e.step_s)
    return min(found, key=lambda e: e.peak_memory_bytes)


def _table_for(model: ModelSpec, cluster: ClusterSpec, cal: Calibration, pairs: bool, memo: dict) -> CostTable:
    par = cluster.parallel
    key = (model.name, par.tp, par.cp, par.ep, par.etp, par.dp, par.pp > 1, cluster.training, cluster.network, cal,
           pairs)  # pp > 1: FSDP holds gathered weights (profiler.analytical, [Note: FSDP under a pipeline])
    if key not in memo:
        memo[key] = analytical_costs(model, cluster, calibration=cal, size_curve_sizes=(), pairs=pairs)
    return memo[key]
