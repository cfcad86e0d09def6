"""Partition for one schedule order: the solvers behind ``--partition``.

``partition_for_schedule`` returns candidate partitions, best first by its method's
objective, all within the memory limit (exact per-rank peaks, see
``solvers.partition.inflight``) and the pins:

- ``overlap``: the step estimate of ``solvers.partition.model`` with post-overlap
  costs; one stage per rank: exact DP (lexicographic: min estimate, then min sum of
  squared stage terms) plus the k best splits by estimate; several: CP-SAT
  (``solvers.partition.virtual``) warm-started from the chunk-sequence DP, repaired to fit
  every rank's memory (``solvers.partition.memory_repair``) when it does not.
- ``serial``: min-max of each stage's serial F + I + W (overlap ignored), the
  serially balanced ablation.
- ``flops``: min-max of model FLOPs per stage (DeepSpeed-style).
- ``uniform``: Megatron's even split of decoder layers (memory is not considered).

With several stages per rank, ``serial``/``flops`` (and the CP-SAT hint) give each
chunk ``limit / vpp`` of memory, a sufficient condition for the rank limit.

The memory limit is one byte count per rank (``rank_caps``): the same for all, or on a
mixed fleet each rank's device group's (``planner.core.devices``), so a smaller GPU's
stages get fewer layers through the same DP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.core.costs import CostTable
from planner.core.errors import BudgetExhausted, InfeasibleError
from planner.core.placement import Bounds, stage_ranks
from planner.core.schedule import Schedule
from planner.core.units import format_bytes
from solvers.partition.ranges import (RangeTest, k_best_partitions, minmax_partition, prefix_sums,
                               range_table, uniform_partition)
from solvers.partition.memory_repair import repair_memory
from solvers.partition.model import StepModel
from solvers.partition.pins import StagePins, pinned_cuts, pins_allow
from solvers.partition.virtual import vpp_partition

__all__ = ["METHODS", "PartitionResult", "partition_for_schedule", "memory_infeasible_message", "rank_caps"]

METHODS = ("overlap", "serial", "flops", "uniform")
"""Partition methods (``--partition``)."""


@dataclass(frozen=True, kw_only=True)
class PartitionResult:
    """Candidate partitions for one schedule, best first."""

    candidates: list[Bounds]
    """Partitions to evaluate by simulation, the method's optimum first."""
    estimate_s: float
    """Step estimate of ``candidates[0]`` (``StepModel.estimate``)."""
    solver: str
    """dp, cp-sat, repair (``solvers.partition.memory_repair``) or fixed."""
    status: str
    """OPTIMAL (for the method's objective), FEASIBLE or FIXED."""
    gap: float | None
    """CP-SAT's relative gap; None for the DPs (exact) and fixed splits."""
    fits_memory: bool
    """False only for a baseline that had to ignore the limit (``strict=False``)."""
    model: StepModel
    """The model the estimates and memory come from."""


def partition_for_schedule(table: CostTable, schedule: Schedule, *, pp: int, vpp: int = 1,
                           placement: str = "loop", memory_limit_bytes: int | None = None,
                           method: str = "overlap", pins: StagePins | None = None, k: int = 4,
                           time_limit_s: float = 10.0, seed: int = 0,
                           strict: bool = True, rank_memory_bytes: Sequence[int] = ()) -> PartitionResult:
    """Partition ``table`` for ``schedule`` (see module doc).

    With ``strict=False`` a method that cannot meet the memory limit falls back to its
    unconstrained split with ``fits_memory=False`` (for baselines); otherwise raises
    ``InfeasibleError`` naming the tightest stage and the knobs. ``rank_memory_bytes`` lowers
    the limit rank by rank (mixed fleets).
    """
    S = pp * vpp
    caps = rank_caps(memory_limit_bytes, rank_memory_bytes, pp)
    ranks = stage_ranks(S, pp, placement)
    model = StepModel(table, schedule, ranks, overlap=method == "overlap")
    roles = [lc.role for lc in table.layers]
    pins = pins or StagePins()
    cuts = pinned_cuts(pins, roles, S) if pins.any else {}
    allowed = pins_allow(cuts) if cuts else None
    if method == "uniform" or pins.stages is not None:  # every boundary pinned: nothing to choose
        bounds = list(pins.stages) if pins.stages is not None else \
            uniform_partition(roles, S, first=pins.first, last=pins.last)
        fits = _fits(model, bounds, caps)
        return PartitionResult(candidates=[bounds], estimate_s=model.estimate(bounds), solver="fixed",
                               status="FIXED", gap=None, fits_memory=fits, model=model)
    try:
        return _solve(model, table, method, caps, cuts, vpp, k, time_limit_s, seed)
    except TimeoutError as exc:  # [Note: unproven] a budget that ran out proves nothing
        if caps is not None and _memory_proven_short(model, caps, allowed):
            raise InfeasibleError(memory_infeasible_message(model, caps, allowed)) from None
        raise BudgetExhausted(f"{exc}, and no memory bound rules a partition out") from None
    except BudgetExhausted:
        raise
    except InfeasibleError:
        if caps is None:
            raise
        if strict:
            raise InfeasibleError(memory_infeasible_message(model, caps, allowed)) from None
    relaxed = _solve(model, table, method, None, cuts, vpp, k, time_limit_s, seed)
    return PartitionResult(candidates=relaxed.candidates[:1], estimate_s=relaxed.estimate_s,
                           solver=relaxed.solver, status=relaxed.status, gap=relaxed.gap,
                           fits_memory=False, model=model)


def rank_caps(limit: int | None, rank_bytes: Sequence[int], pp: int) -> tuple[int, ...] | None:
    """One byte cap per rank: ``limit`` on each, lowered to ``rank_bytes[r]`` where given."""
    if limit is None and not rank_bytes:
        return None
    if not rank_bytes:
        return (limit,) * pp  # type: ignore[return-value]
    return tuple(r if limit is None else min(limit, r) for r in rank_bytes)


def _fits(model: StepModel, bounds: Bounds, caps: tuple[int, ...] | None) -> bool:
    return caps is None or all(m <= caps[r] for r, m in model.rank_memory(bounds).items())


def _feasible(model: StepModel, limit: tuple[int, ...] | None, allowed: RangeTest | None,
              vpp: int) -> RangeTest | None:
    if limit is None:
        return allowed
    ends = model.max_ends([limit[r] // vpp for r in model.ranks])

    def ok(s: int, a: int, b: int) -> bool:
        return b <= ends[s][a] and (allowed is None or allowed(s, a, b))
    return ok


def _solve(model: StepModel, table: CostTable, method: str, limit: tuple[int, ...] | None,
           cuts: dict[int, int], vpp: int, k: int, time_limit_s: float, seed: int) -> PartitionResult:
    n, S = model.num_layers, model.num_stages
    allowed = pins_allow(cuts) if cuts else None
    feasible = _feasible(model, limit, allowed, vpp)
    if method in ("serial", "flops"):
        p = prefix_sums([lc.flops if method == "flops" else lc.serial_f + lc.serial_i + lc.w
                         for lc in table.layers])
        bounds = minmax_partition(n, S, lambda s, a, b: p[b] - p[a], feasible,
                                  tie_break=lambda s, a, b: (p[b] - p[a]) ** 2)
        return _result(model, [bounds], "dp", "OPTIMAL", None)
    if method != "overlap":
        raise ValueError(f"unknown partition method {method!r}: use one of {', '.join(METHODS)}")
    if vpp == 1:
        terms = range_table(n, S, model.term, feasible)
        best = minmax_partition(n, S, model.term, feasible, table=terms,
                                tie_break=lambda s, a, b: terms[s][a][b] ** 2)
        others = [b for _, b in k_best_partitions(n, S, model.term, k, feasible, table=terms)]
        return _result(model, _unique([best] + others), "dp", "OPTIMAL", None)
    hint, hint_from = _chunk_hint(model, feasible, allowed), "dp"
    hint_fits = _fits(model, hint, limit)
    if not hint_fits and limit is not None:  # CP-SAT starts from a split that fits when one is near
        if (fixed := repair_memory(model, hint, limit, frozenset(cuts))) is not None:
            hint, hint_from, hint_fits = fixed, "repair", True
    try:
        res = vpp_partition(model, memory_limit_bytes=limit, hint=hint, cuts=cuts,
                            time_limit_s=time_limit_s, seed=seed)
    except TimeoutError:
        if hint_fits:
            return _result(model, [hint], hint_from, "FEASIBLE", None)
        if limit is None:
            raise
        lean = minmax_partition(n, S, model.stage_memory, allowed)  # the memory-balanced split may fit
        if _fits(model, lean, limit):
            return _result(model, [lean], "dp", "FEASIBLE", None)
        if (fixed := repair_memory(model, lean, limit, frozenset(cuts))) is not None:
            return _result(model, [fixed], "repair", "FEASIBLE", None)
        raise
    pool = [res.bounds, hint] if hint_fits else [res.bounds]
    return _result(model, _unique(pool), "cp-sat", res.status, res.gap)


def _chunk_hint(model: StepModel, feasible: RangeTest | None, allowed: RangeTest | None) -> Bounds:
    """Chunk-sequence DP on per-chunk work: with each chunk held to ``limit / vpp`` when that
    is feasible (then the hint fits memory), else ignoring memory (CP-SAT enforces it)."""
    n, S = model.num_layers, model.num_stages

    def square(s: int, a: int, b: int) -> float:
        return model.work(s, a, b) ** 2
    try:
        return minmax_partition(n, S, model.work, feasible, tie_break=square)
    except InfeasibleError:
        return minmax_partition(n, S, model.work, allowed, tie_break=square)


def _result(model: StepModel, candidates: list[Bounds], solver: str, status: str,
            gap: float | None) -> PartitionResult:
    return PartitionResult(candidates=candidates, estimate_s=model.estimate(candidates[0]), solver=solver,
                           status=status, gap=gap, fits_memory=True, model=model)


def _unique(bounds: list[Bounds]) -> list[Bounds]:
    out: list[Bounds] = []
    for b in bounds:
        if b not in out:
            out.append(b)
    return out


def _memory_share(model: StepModel, caps: tuple[int, ...]):
    """A stage's peak as the memory-balanced split weighs it: its bytes, or on ranks with
    different caps its share of its own rank's cap."""
    if len(set(caps)) == 1:
        return model.stage_memory
    return lambda s, a, b: model.stage_memory(s, a, b) / caps[model.ranks[s]]


def _memory_proven_short(model: StepModel, caps: tuple[int, ...], allowed: RangeTest | None) -> bool:
    """Whether no partition can fit ``limit`` under this schedule: the split that minimises
    the largest *stage* peak (exact, ``minmax_partition``) is over it, and a rank's peak is
    at least the peak of each stage it holds.

    [Note: unproven] A solver that runs out of budget before it finds a partition proves
    nothing. Its caller first falls back to a feasible split (the warm start, or the
    memory-balanced split when that fits, then to that split repaired for the ranks' sums,
    ``solvers.partition.memory_repair``); failing those, this bound decides between a
    proven shortfall (``InfeasibleError`` with the numbers and the knobs) and
    ``BudgetExhausted`` (not proven; raise the budget)."""
    n, S = model.num_layers, model.num_stages
    bounds = minmax_partition(n, S, _memory_share(model, caps), allowed)
    return any(model.stage_memory(s, *bounds[s]) > caps[model.ranks[s]] for s in range(S))


def memory_infeasible_message(model: StepModel, caps: tuple[int, ...], allowed: RangeTest | None = None) -> str:
    """Name the tightest stage of the most memory-balanced split, bytes needed vs available,
    and the knobs that help."""
    n, S = model.num_layers, model.num_stages
    bounds = minmax_partition(n, S, _memory_share(model, caps), allowed)
    per_rank = model.rank_memory(bounds)
    rank = max(per_rank, key=lambda r: (per_rank[r] / caps[r], -r))
    limit = caps[rank]
    stages = [s for s in range(S) if model.ranks[s] == rank]
    s = max(stages, key=lambda t: model.stage_memory(t, *bounds[t]))
    a, b = bounds[s]
    static = sum(model.static_bytes(*bounds[t]) for t in stages)
    work = max(model.work_bytes(*bounds[t]) for t in stages)
    flight = max((full for p in model.points.get(rank, []) for st, full, _ in p if st == s), default=0)
    where = f"stage {s} (rank {rank}, layers [{a}, {b}), {flight} microbatches in flight)"
    if len(stages) > 1:
        where = f"rank {rank} (stages {', '.join(map(str, stages))}; {where.split(' (')[0]} holds layers " \
                f"[{a}, {b}) with {flight} microbatches in flight)"
    return (f"no partition fits the memory limit: even the most memory-balanced split puts {where} at "
            f"{format_bytes(per_rank[rank])} needed ({format_bytes(static)} parameters/gradients/optimizer "
            + (f"+ {format_bytes(work)} transient " if work else "")
            + f"+ {format_bytes(per_rank[rank] - static - work)} activations) vs {format_bytes(limit)} available; "
            "use more stages (--pp), " + ("a schedule with fewer microbatches in flight (e.g. --schedule 1f1b), "
                                          if flight > 1 else "")
            + "or activation recomputation (--recompute selective or full)")
