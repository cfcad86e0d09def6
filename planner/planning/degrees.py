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

[Note: screen work] The screen is a phase like the planner's others ([Note: work budget]
in ``solvers.schedule.search.budget``): it spends a share of ``--work`` counted in units, not
read off a clock: each cost-table layer built counts ``TABLE_UNITS_PER_LAYER``, each
estimate one per layer and stage (``planner.planning.estimate.ScreenWork``), and
``UNITS_PER_WORK_S`` units make a reference second. Before each candidate it checks the
count (so it goes at most one candidate's work past its share) and, with ``--time-limit``,
the wall deadline; stopped, it ranks what it has estimated, in ``_screen_order``. Like
every phase it keeps at least one candidate: it stops only once a configuration fits, so a
cut never claims that none fits (only a screen of every candidate does), and when the
configurations it kept cannot be planned the caller raises ``BudgetExhausted``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.core.cluster import ClusterSpec, ParallelSpec
from planner.core.errors import InputError
from planner.core.layer_math import layer_params
from planner.core.model import ModelSpec
from planner.planning.estimate import TABLE_UNITS_PER_LAYER, ScreenWork, StepEstimate, estimate_step
from profiler.analytical import state_bytes
from solvers.schedule.search.budget import Deadline

__all__ = ["DegreeChoice", "DegreeSearch", "search_degrees", "fitting_shapes", "why_first", "degree_table",
           "UNITS_PER_WORK_S", "RESCREEN", "SERIAL_SHARE"]

RESCREEN = 40
"""Candidates re-estimated with EP overlap pair costs after the serial screen."""

UNITS_PER_WORK_S = 100_000
"""Screen work units (``planner.planning.estimate.ScreenWork``) per reference second of
``--work`` ([Note: screen work])."""

SERIAL_SHARE = 0.8
"""Share of the screen's work the serial pass may spend; the EP-overlap rescoring of its
best has the rest."""


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
                            if base.sites.count > 1 and not base.sites.crossings(
                                    num_gpus=gpus, pp=pp, dp=dp, tp=tp, cp=cp, ep=ep, etp=1):
                                continue  # tp or ep would cross the sites' slow link
                            yield replace(base, num_gpus=gpus,
                                          parallel=ParallelSpec(pp=pp, vpp=vpp, tp=tp, ep=ep, dp=dp, cp=cp),
                                          training=replace(tr, micro_batch_size=mbs))


@dataclass(frozen=True, kw_only=True)
class DegreeSearch:
    """The ranked configurations and what the screen spent on them ([Note: screen work])."""

    ranked: list[DegreeChoice]
    """Memory-feasible configurations, fastest first (at most ``top``)."""
    candidates: int
    """Combinations enumerated."""
    screened: int
    """Of them, examined before the screen stopped (prefiltered or estimated)."""
    rescored: int
    """Best serial estimates re-estimated with EP overlap."""
    work_units: int
    """Work counted (``ScreenWork.units``)."""
    allowed_units: float | None
    """The screen's share of ``--work`` in units; None: uncounted."""
    candidate_units_max: int
    """The most one candidate can count (its tables and estimates): how far past the share a
    screen may go, since it checks before each candidate."""
    work_cut: bool
    """Stopped by its share of the work count (deterministic)."""
    wall_cut: bool
    """Stopped by the wall deadline (``--time-limit``)."""

    def record(self) -> dict:
        """What the plan's ``solver.degrees.screen`` says."""
        return {"candidates": self.candidates, "screened": self.screened, "rescored": self.rescored,
                "work_units": self.work_units, "allowed_units": self.allowed_units,
                "candidate_units_max": self.candidate_units_max, "work_cut": self.work_cut,
                "wall_cut": self.wall_cut}


def search_degrees(model: ModelSpec, base: ClusterSpec, gpus: int, *, top: int = 10, work: float | None = None,
                   deadline: Deadline | None = None) -> DegreeSearch:
    """The ``top`` memory-feasible configurations of ``gpus`` GPUs, fastest first, screened
    within ``work`` reference seconds ([Note: screen work]; None: every candidate) and before
    ``deadline`` (the wall cap, when given)."""
    if gpus < 1:
        raise InputError("--gpus", f"must be >= 1, got {gpus}")
    cands = sorted(_candidates(model, base, gpus), key=_screen_order)
    allowed = None if work is None else work * UNITS_PER_WORK_S
    screen = ScreenWork()
    fitting, examined, cut = _serial_screen(model, cands, screen, allowed, deadline)
    if not fitting:  # the screen stops only with one that fits: it examined every candidate
        raise InputError("--gpus", f"no tp/pp/vpp/ep/cp/dp/micro-batch combination of {gpus} GPUs fits "
                         f"{model.name} in {base.memory_limit_bytes / 2**30:.1f} GiB per GPU",
                         "use more GPUs, a GPU with more memory, or a smaller global batch")
    fitting.sort(key=lambda d: (d.estimate.step_s, d.label))
    rescored, rescut = _rescore(model, fitting[:RESCREEN], screen, allowed, deadline)
    rescored.sort(key=lambda d: (d.estimate.step_s, d.label))
    return DegreeSearch(ranked=rescored[:top], candidates=len(cands), screened=examined, rescored=len(rescored),
                        work_units=screen.units, allowed_units=allowed, candidate_units_max=_most_units(model, base),
                        work_cut=(cut or rescut) == "work", wall_cut="wall" in (cut, rescut))


def fitting_shapes(model: ModelSpec, base: ClusterSpec, gpus: int) -> list[ClusterSpec]:
    """The configurations of ``gpus`` GPUs the search would screen (the global batch kept, the
    static-memory prefilter passed), before any estimate: does any combination exist at all?"""
    return [c for c in _candidates(model, base, gpus) if _static_bytes(model, c) <= c.memory_limit_bytes]


def _screen_order(c: ClusterSpec) -> tuple:
    """Micro-batch size 1 and one stage per rank first, over every tp, cp, pp and ep: the
    screen stopped early by its budget has seen each degree (later tiers reuse their tables)."""
    p = c.parallel
    return (c.training.micro_batch_size, p.vpp, p.tp, p.cp, p.pp, p.ep)


def _stop(screen: ScreenWork, allowed: float | None, deadline: Deadline | None) -> str | None:
    """Why the screen stops before its next candidate: "work" once its share is counted,
    "wall" once the deadline passed; None: go on."""
    if allowed is not None and screen.units >= allowed:
        return "work"
    if deadline is not None and deadline.expired():
        return "wall"
    return None


def _serial_screen(model: ModelSpec, cands: list[ClusterSpec], screen: ScreenWork, allowed: float | None,
                   deadline: Deadline | None) -> tuple[list[DegreeChoice], int, str | None]:
    """Serial estimates (the cheapest recomputation mode that fits) of the candidates in turn
    until ``SERIAL_SHARE`` of the allowed work: (those that fit, candidates examined, cut)."""
    fitting: list[DegreeChoice] = []
    share = None if allowed is None else allowed * SERIAL_SHARE
    for k, c in enumerate(cands):
        cut = _stop(screen, share, deadline) if fitting else None  # keep one that fits
        if cut:
            return fitting, k, cut
        if _static_bytes(model, c) > c.memory_limit_bytes:
            continue
        for mode in c.training.recompute_modes():  # cheapest mode that fits
            est = estimate_step(model, c.with_recompute(mode), overlap=False, screen=screen)
            if est.fits:
                fitting.append(DegreeChoice(cluster=c, estimate=est))
                break
    return fitting, len(cands), None


def _rescore(model: ModelSpec, best: list[DegreeChoice], screen: ScreenWork, allowed: float | None,
             deadline: Deadline | None) -> tuple[list[DegreeChoice], str | None]:
    """The best serial estimates again with EP overlap (pair costs), in rank order, until the
    allowed work is spent (at least the first): (re-estimated ones that fit, cut)."""
    out: list[DegreeChoice] = []
    for k, d in enumerate(best):
        cut = _stop(screen, allowed, deadline) if k else None
        if cut:
            return out, cut
        est = estimate_step(model, d.cluster, screen=screen)
        if est.fits:
            out.append(DegreeChoice(cluster=d.cluster, estimate=est))
    return out, None


def _most_units(model: ModelSpec, base: ClusterSpec) -> int:
    """The most work one candidate counts: a table and two estimates per recomputation mode."""
    per_mode = TABLE_UNITS_PER_LAYER * model.num_layers + 2 * (model.num_layers + model.num_layers)
    return len(base.training.recompute_modes()) * per_mode


def _static_bytes(model: ModelSpec, c: ClusterSpec) -> float:
    """Weights, gradients and optimizer state of the average pipeline rank (a lower bound
    on the busiest rank's), bytes, by the cost tables' rule (``profiler.analytical.state_bytes``):
    the prefilter before any cost table."""
    return sum(sum(state_bytes(layer_params(layer, model), c)) for layer in model.layers) / c.parallel.pp


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
