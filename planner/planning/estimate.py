"""Closed-form step estimate of one parallel configuration (the degree search's screen).

From the analytical cost table (``profiler.analytical``), with the planner's own rules:

1. Partition: the layers (embedding and head included) split into pp x vpp contiguous
   stages minimising the largest serial stage cost, by the planner's min-max DP
   (``solvers.partition.ranges.weighted_partition``); stage s on rank s mod pp (loop
   placement, Megatron's interleaving); the stages' costs are ``planner.core.stage_costs``'s.
2. A rank's time per microbatch: serial F + I + W of its stages or, with EP overlap, each
   stage's fused pair ``StageCosts.fused_time(s, s)`` + W (Megatron pairs F.layer[0] with
   B.layer[last]), plus one activation send and one gradient send per stage.
3. Pipeline: ``M x t_max + (pp - 1) / vpp x t_serial_max`` (interleaved 1F1B bubble,
   Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
   Clusters", section 2.2.2; warm-up and cool-down run serially).
   Over sites (``planner.core.sites``) the boundaries between sites pay the inter-site hop
   (``StageCosts.p2p_time``) when pp crosses; with ``crossing: auto`` each crossing the
   degrees allow is estimated and the faster kept.
4. Data parallelism, the optimizer, MFU and tokens/s:
   ``planner.planning.prediction.predict_optimizer_step``, the one prediction every plan and benchmark reports.
5. Peak memory per rank: what every rank holds (``StageCosts.static_per_rank``) plus the
   peak activation bytes of the order the planner runs for the shape (1F1B or interleaved
   1F1B, their fused EP-overlap forms: ``solvers.schedule.families.generators``) from its in-flight
   counts (``solvers.partition.inflight.memory_points``): the simulator's peak of that order.

The full planner (``planner.planning``) refines partition and schedule; this estimate
only ranks degrees before it (``planner.planning.degrees``). Published runs are compared
with what ``ppplan plan`` predicts (``benchmarks/published.py``), not with this screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.core.cluster import ClusterSpec
from planner.core.costs import CostTable
from planner.core.model import ModelSpec
from planner.core.placement import stage_ranks
from planner.core.sites import with_site_hop
from planner.core.stage_costs import StageCosts, stage_costs
from planner.planning.dp_step import busiest_microbatch_compute, site_link_busy
from planner.planning.prediction import predict_optimizer_step
from profiler.analytical import analytical_costs
from profiler.cost_model.fitted import active_constants
from solvers.partition.inflight import MemoryPoint, memory_points, peak_activation_bytes
from solvers.partition.ranges import weighted_partition
from solvers.schedule.families.generators import interleaved_1f1b

__all__ = ["StepEstimate", "ScreenWork", "estimate_step", "inflight_microbatches", "TABLE_UNITS_PER_LAYER"]

TABLE_UNITS_PER_LAYER = 8
"""Work units of one layer of a cost table built, against one unit per layer (and per stage)
estimated: building a table's layer costs about eight times estimating it ([Note: screen
work] in ``planner.planning.degrees``)."""


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
    rank_peak_bytes: tuple[int, ...]
    """Peak memory of each pipeline rank."""
    fits: bool
    """Peak memory within the cluster's limit."""
    pipeline_s: float
    """Forward/backward schedule time."""
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
    bounds: tuple[tuple[int, int], ...]
    """Layer range ``[start, end)`` of each stage."""


@dataclass
class ScreenWork:
    """What the degree screen builds once and shares across its estimates (cost tables,
    partitions, in-flight points), and the work it has counted (``units``: table layers
    built x ``TABLE_UNITS_PER_LAYER`` plus layers and stages estimated; never a clock)."""

    units: int = 0
    """Work counted so far."""
    tables: dict = field(default_factory=dict)
    """Memo key -> cost table (a table depends on neither vpp nor pp beyond pp > 1)."""
    partitions: dict = field(default_factory=dict)
    """(per-layer serial costs, stages) -> bounds."""
    points: dict = field(default_factory=dict)
    """(pp, vpp, microbatches, fused) -> memory points of that order."""


def inflight_microbatches(pp: int, vpp: int, microbatches: int) -> int:
    """Microbatches of a 1F1B / interleaved order whose in-flight counts are those of
    ``microbatches``: after a warm-up of fewer than ``(vpp + 1) pp`` chunks the counts repeat
    every ``pp x vpp`` steady steps, and ``4 pp`` microbatches leave more than one such period
    (a multiple of pp, as the interleaved order needs)."""
    return min(microbatches, 4 * pp)


def _points(pp: int, vpp: int, microbatches: int, fused: bool, screen: ScreenWork) -> dict[int, list[MemoryPoint]]:
    m = inflight_microbatches(pp, vpp, microbatches)
    key = (pp, vpp, m, fused)
    if key not in screen.points:
        screen.points[key] = memory_points(interleaved_1f1b(pp, vpp, m, fuse=fused))
    return screen.points[key]


def _bounds(t: CostTable, stages: int, screen: ScreenWork) -> list[tuple[int, int]]:
    serial = tuple(lc.serial_f + lc.serial_i + lc.w for lc in t.layers)
    key = (serial, stages)
    if key not in screen.partitions:
        screen.partitions[key] = weighted_partition(serial, stages)
    return screen.partitions[key]


def _rank_peaks(sc: StageCosts, points: dict[int, list[MemoryPoint]]) -> list[int]:
    """Static bytes of each rank plus the activation peak of its memory points."""
    act = dict(enumerate(sc.act_bytes))
    act_w = dict(enumerate(sc.act_w_bytes))
    return [static + peak_activation_bytes(points.get(r, []), act, act_w)
            for r, static in enumerate(sc.static_per_rank())]


def _one(model: ModelSpec, cluster: ClusterSpec, t: CostTable, overlap: bool, screen: ScreenWork) -> StepEstimate:
    par = cluster.parallel
    stages = par.pp * par.vpp
    bounds = _bounds(t, stages, screen)
    sc = stage_costs(t, bounds, stage_ranks(stages, par.pp, "loop"))
    screen.units += t.num_layers + stages
    serial = [sc.f[s] + sc.i[s] + sc.w[s] for s in range(stages)]
    steady = [sc.fused_time(s, s) + sc.w[s] if overlap else serial[s] for s in range(stages)]
    p2p = [2 * sc.p2p_time(s) if stages > 1 else 0.0 for s in range(stages)]  # send F and B per chunk
    rank_t = [sum(steady[s] + p2p[s] for s in range(r, stages, par.pp)) for r in range(par.pp)]
    rank_serial = [sum(serial[r::par.pp]) for r in range(par.pp)]
    m = cluster.microbatches_per_step
    bubble = (par.pp - 1) / par.vpp * max(rank_serial)
    pipeline = m * max(rank_t) + bubble
    peaks = _rank_peaks(sc, _points(par.pp, par.vpp, m, overlap, screen))
    pred = predict_optimizer_step(model, cluster, step_time_s=pipeline, peak_memory_bytes=peaks,  # as a plan's (dp_step)
                                  microbatch_compute_s=busiest_microbatch_compute(sc), microbatches=m,
                                  link_busy_s=site_link_busy(sc, m))
    peak = max(peaks)
    return StepEstimate(step_s=pred.optimizer_step_time_s, tokens_per_s_per_gpu=pred.tokens_per_s_per_gpu,
                        mfu=pred.mfu, peak_memory_bytes=peak, rank_peak_bytes=tuple(peaks),
                        fits=peak <= cluster.memory_limit_bytes, pipeline_s=pipeline, bubble_s=bubble,
                        dp_exposed_s=pred.dp_exposed_s, optimizer_s=pred.optimizer_s,
                        recompute=cluster.training.recompute, overlap=overlap, bounds=tuple(bounds))


def estimate_step(model: ModelSpec, cluster: ClusterSpec, *, overlap: bool | None = None,
                  screen: ScreenWork | None = None) -> StepEstimate:
    """Best estimate over the cluster's recomputation modes (fastest that fits, else the
    smallest) and, with ``overlap=None`` and ep > 1, with and without EP overlap.
    ``screen`` shares tables, partitions and in-flight points across calls and counts the work."""
    screen = ScreenWork() if screen is None else screen
    if cluster.sites.count > 1 and cluster.sites.crossing == "auto":  # each crossing the degrees allow
        p = cluster.parallel
        found = [estimate_step(model, replace(cluster, sites=replace(cluster.sites, crossing=c)), overlap=overlap,
                               screen=screen)
                 for c in cluster.sites.check_degrees(num_gpus=cluster.num_gpus, pp=p.pp, dp=p.dp, tp=p.tp, cp=p.cp,
                                                      ep=p.ep, etp=p.etp)]
        return min(found, key=lambda e: (not e.fits, e.step_s if e.fits else e.peak_memory_bytes))
    overlaps = (overlap,) if overlap is not None else ((False, True) if cluster.parallel.ep > 1 else (False,))
    found = []
    for mode in cluster.training.recompute_modes():
        c = cluster.with_recompute(mode)
        table = _table_for(model, c, any(overlaps), screen)
        found += [_one(model, c, table, ov, screen) for ov in overlaps]
    fitting = [e for e in found if e.fits]
    if fitting:
        return min(fitting, key=lambda e: e.step_s)
    return min(found, key=lambda e: e.peak_memory_bytes)


def _table_for(model: ModelSpec, cluster: ClusterSpec, pairs: bool, screen: ScreenWork) -> CostTable:
    par, cal = cluster.parallel, active_constants()
    key = (model.name, par.tp, par.cp, par.ep, par.etp, par.dp, par.pp > 1, cluster.training, cluster.network, cal,
           pairs)  # pp > 1: FSDP holds gathered weights (profiler.analytical, [Note: FSDP under a pipeline])
    if key not in screen.tables:
        screen.tables[key] = analytical_costs(model, cluster, constants=cal, size_curve_sizes=(), pairs=pairs)
        screen.units += TABLE_UNITS_PER_LAYER * model.num_layers
    return with_site_hop(screen.tables[key], cluster.sites, num_gpus=cluster.num_gpus, pp=par.pp)
