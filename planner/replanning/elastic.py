"""Re-planning for another GPU count: after lost GPUs or a restart with another world size.

Elastic-training systems re-plan the whole job for the GPUs that remain (Oobleck, SOSP'23;
ReCycle, SOSP'24; TrainMover, OSDI'26); ppplan does it offline, from the saved plan:
1. GPUs: ``gpus``, or the world minus ``lost`` ranks; the count used is weighed ([Note: GPU
   count]), the GPUs left over stay idle (spares).
2. Plan: ``planner.api.plan(..., gpus=N)`` (the degree search of ``ppplan plan --gpus``) with
   the old plan's target and seed, recomputation ``auto``, the old plan's ``--work`` unless given.
3. Migration (``migration.device_migration``): surviving devices in rank order (nodes that
   lost none first, so idle GPUs sit on damaged nodes), each new pipeline rank on the block of
   them that held most of its layers; per layer who sends what, bytes per link, time; each new
   stage's local layer names and the Megatron reload flags (``planner.replanning.reload``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from planner.core.cluster import ClusterSpec
from planner.core.errors import InputError
from planner.core.model import ModelSpec
from planner.core.plan import Plan, load_plan_file
from planner.planning.degrees import fitting_shapes, search_degrees
from planner.planning.delivery import deliver
from planner.planning.dp_step import optimizer_step_time
from planner.replanning.inputs import plan_cluster, plan_model
from planner.replanning.diff import placement_of
from planner.replanning.migration import DeviceMigration, Placement, device_migration
from planner.replanning.search import layer_ranks
from planner.replanning.standby import parse_standby, standby_fit
from planner.replanning.reload import migration_section
from solvers.schedule.search.budget import DEFAULT_WORK, check_work

__all__ = ["ElasticResult", "replan_gpus", "parse_lost_ranks", "BATCH_SLACK", "COUNT_SLACK", "COUNT_SHARE"]

BATCH_SLACK = 8
"""With ``allow_batch_change``, the global batch may drop by at most 1/BATCH_SLACK."""

COUNT_SLACK = 8
"""GPU counts down to 1/COUNT_SLACK below the available one are weighed ([Note: GPU count])."""

BATCH_CHOICES = 3
"""Changed global batches weighed with ``allow_batch_change`` (those leaving the most combinations)."""

COUNT_SHARE = 0.2
"""Share of ``--work`` the screens that weigh GPU counts spend together."""

# [Note: GPU count]
# The degree search needs dp x micro-batch to divide the global batch, which most counts do
# not allow (63 GPUs and 256 sequences leave dp 1 only), and the largest count that does
# can be slow (62 GPUs: pp 31, dp 1). So the re-plan weighs the available count and the
# node multiples down to 1/COUNT_SLACK below it (each with a combination keeping the global
# batch and passing the static-memory prefilter, ``fitting_shapes``), with
# ``allow_batch_change`` also the available count with up to BATCH_CHOICES smaller global
# batches, screens each with the degree search's own screen (``search_degrees``, an equal
# part of COUNT_SHARE of ``--work``) and plans the one whose best estimate moves the most
# tokens per second in all; the GPUs it leaves are idle spares. With none in that window it
# takes the largest count below that keeps the batch.


@dataclass(frozen=True, kw_only=True)
class ElasticResult:
    """Everything ``ppplan replan --gpus`` reports."""

    plan: Plan
    """The new plan, with ``replan`` and ``migration`` sections."""
    old: Plan
    """The plan it replaces."""
    available: int
    """GPUs left (``--gpus``, or the world minus the lost ranks)."""
    lost: tuple[int, ...]
    """Lost global ranks of the old plan (device ids)."""
    idle: tuple[int, ...]
    """Surviving devices the new plan leaves unused."""
    migration: DeviceMigration
    """Per-layer moves."""

    @property
    def kept_throughput(self) -> float:
        """Tokens/s per used GPU after over before."""
        return self.plan.predicted.tokens_per_s_per_gpu / self.old.predicted.tokens_per_s_per_gpu


def parse_lost_ranks(text: str, world: int) -> tuple[int, ...]:
    """``R1,R2,...`` (each a global rank of the old plan, ``A-B`` for a range) to sorted ranks."""
    out: set[int] = set()
    for item in text.split(","):
        lo, _, hi = item.strip().partition("-")
        try:
            ranks = range(int(lo), int(hi or lo) + 1)
        except ValueError:
            raise InputError("--lost-ranks", f"{item.strip()!r} is not a rank or a range A-B",
                             "pass global ranks of the old plan, e.g. 3,8-15") from None
        if not ranks or ranks.start < 0 or ranks.stop > world:
            raise InputError("--lost-ranks", f"{item.strip()!r} is outside the plan's ranks 0-{world - 1}",
                             f"pass ranks below {world}")
        out.update(ranks)
    if len(out) >= world:
        raise InputError("--lost-ranks", f"all {world} ranks lost", "leave at least one GPU")
    return tuple(sorted(out))


def replan_gpus(plan: Plan | str | Path, *, gpus: int | None = None, lost_ranks: tuple[int, ...] = (),
                allow_batch_change: bool = False, work: float | None = None, model: str | None = None,
                standby: str | None = None) -> ElasticResult:
    """Re-plan ``plan`` for ``gpus`` GPUs, or for its world without ``lost_ranks`` (module doc);
    ``standby`` (``TYPE:COUNT``) adds which of the old plan's roles such spares can take
    (``planner.replanning.standby``)."""
    from planner.api import plan as make

    old = plan if isinstance(plan, Plan) else load_plan_file(plan)
    if old.costs.get("source", "analytical") != "analytical":
        raise InputError("plan.costs.source", f"the plan was made from {old.costs['source']} costs, measured "
                         "for its own degrees", "re-plan from an analytical plan, or profile the new shape")
    spec, base = plan_model(old, model), plan_cluster(old)
    spare = parse_standby(standby) if standby is not None else None
    world = base.num_gpus
    available = world - len(lost_ranks) if lost_ranks else gpus
    if available is None or available < 1:
        raise InputError("--gpus", f"must be >= 1, got {available}", "pass the GPUs that remain")
    base = replace(base, training=replace(base.training, recompute="auto"))
    budget = check_work(work) if work is not None else float((old.solver.budget or {}).get("work") or DEFAULT_WORK)
    used, batch = _gpus_and_batch(spec, base, available, allow_batch_change, budget * COUNT_SHARE)
    cluster = replace(base, training=replace(base.training, global_batch=batch))
    new = make(model or old.model.name, cluster, gpus=used, work=budget * (1 - COUNT_SHARE),
               seed=int(old.solver.seed or 0),
               target=str(old.extra.get("target", "torch")))
    order = _device_order(world, lost_ranks, base.gpus_per_node) if lost_ranks else list(range(available))
    before = placement_of(old, base, range(world))
    after = placement_of(new, plan_cluster(new), _block_order(before, new, order[:used]))
    move = device_migration(spec, before, after, lost=frozenset(lost_ranks))
    result = ElasticResult(plan=new, old=old, available=available, lost=tuple(lost_ranks),
                           idle=tuple(order[used:]), migration=move)
    new.extra["replan"] = _section(result, budget)
    if spare is not None:
        new.extra["replan"]["standby"] = standby_fit(old, spec, *spare, lost=result.lost)
    new.extra["migration"] = migration_section(spec, new, move, lost=result.lost, idle=result.idle)
    return replace(result, plan=deliver(new))  # [Note: delivered plans]


def _gpus_and_batch(spec: ModelSpec, base: ClusterSpec, available: int, allow_change: bool,
                    work: float) -> tuple[int, int]:
    """(GPUs to use, global batch): the choice whose best screened estimate moves the most
    tokens per second in all ([Note: GPU count]); one line naming the knob when none fits."""
    choices = _choices(spec, base, available, allow_change)
    if not choices:
        batch = base.training.global_batch
        if allow_change:
            raise InputError("--allow-batch-change", f"no global batch within 1/{BATCH_SLACK} below {batch} has a "
                             f"degree combination of {available} GPUs or fewer that fits memory",
                             "pass more --gpus or a GPU with more memory")
        raise InputError("--gpus", f"no degree combination of {available} GPUs or fewer keeps the global batch "
                         f"{batch} within memory", "pass --allow-batch-change, or more GPUs")
    if len(choices) == 1:
        return choices[0]
    best, best_rate = choices[0], -1.0
    for n, batch in choices:
        try:
            ranked = search_degrees(spec, _with_batch(base, batch), n, top=1, work=work / len(choices)).ranked
        except InputError as exc:  # none of this count's combinations fits memory
            if exc.field != "--gpus":
                raise
            continue
        rate = ranked[0].estimate.tokens_per_s_per_gpu * n
        if rate > best_rate:
            best, best_rate = (n, batch), rate
    return best


def _choices(spec: ModelSpec, base: ClusterSpec, available: int, allow_change: bool) -> list[tuple[int, int]]:
    """Candidate (GPUs, global batch) pairs, most GPUs first ([Note: GPU count])."""
    batch, node = base.training.global_batch, base.gpus_per_node
    low = available - available // COUNT_SLACK
    counts = [n for n in range(available, low - 1, -1) if n == available or n % node == 0]
    out = [(n, batch) for n in counts if fitting_shapes(spec, base, n)]
    if allow_change and not any(n == available for n, _ in out):
        sized = []
        for dp in [d for d in range(1, min(available, batch) + 1) if available % d == 0]:
            b = batch // dp * dp
            if b >= batch - batch // BATCH_SLACK and b != batch:
                shapes = fitting_shapes(spec, _with_batch(base, b), available)
                if shapes:
                    sized.append((len(shapes), b))
        out = [(available, b) for _, b in sorted(sized, reverse=True)[:BATCH_CHOICES]] + out
    if not out:  # nothing near the count available: the largest count that keeps the batch
        out = next(([(n, batch)] for n in range(low - 1, 0, -1) if fitting_shapes(spec, base, n)), [])
    return out


def _with_batch(base: ClusterSpec, batch: int) -> ClusterSpec:
    return replace(base, training=replace(base.training, global_batch=batch))


def _device_order(world: int, lost: tuple[int, ...], gpus_per_node: int) -> list[int]:
    """Surviving devices in new-rank order: nodes that lost none first, then the others."""
    damaged = {d // gpus_per_node for d in lost}
    gone = set(lost)
    alive = [d for d in range(world) if d not in gone]
    return sorted(alive, key=lambda d: (d // gpus_per_node in damaged, d))


def _block_order(before: Placement, new: Plan, devices: list[int]) -> list[int]:
    """``devices`` regrouped so that each new pipeline rank's block of GPUs is the free block
    (consecutive ``devices``) that held most of its layers before, best pairs first: GPUs
    that keep or re-slice a layer, or fetch it over NVLink, move less."""
    pp = int(new.parallel.pp)
    group = len(devices) // pp
    blocks = [devices[k * group:(k + 1) * group] for k in range(pp)]
    ranks = layer_ranks(new.bounds(), new.ranks())
    layers_of = [[k for k, r in enumerate(ranks) if r == rank] for rank in range(pp)]
    held = {d: set() for d in range(max(before.devices) + 1)}
    for k in range(len(before.layer_ranks)):
        for g in before.holders(k):
            held[before.devices[g]].add(k)
    score = {(r, b): sum(len(held.get(d, set()).intersection(layers_of[r])) for d in blocks[b])
             for r in range(pp) for b in range(pp)}
    chosen: dict[int, int] = {}
    while len(chosen) < pp:  # the best remaining (rank, block) pair first
        r, b = max((key for key in score if key[0] not in chosen and key[1] not in chosen.values()),
                   key=lambda key: (score[key], -key[0], -key[1]))
        chosen[r] = b
    return [d for rank in range(pp) for d in blocks[chosen[rank]]]


def _section(r: ElasticResult, work: float) -> dict:
    old, new = r.old, r.plan
    o, n = old.parallel, new.parallel
    return {
        "mode": "gpus", "gpus_before": old.cluster.num_gpus, "gpus_available": r.available,
        "gpus_used": new.cluster.num_gpus, "lost_ranks": list(r.lost), "idle_devices": list(r.idle),
        "global_batch_before": old.cluster.training["global_batch"],
        "global_batch_after": new.cluster.training["global_batch"],
        "degrees_before": {k: getattr(o, k) for k in ("tp", "pp", "vpp", "ep", "dp")},
        "degrees_after": {k: getattr(n, k) for k in ("tp", "pp", "vpp", "ep", "dp")},
        "step_before_s": optimizer_step_time(old), "step_after_s": optimizer_step_time(new),
        "tokens_per_s_per_gpu_before": old.predicted.tokens_per_s_per_gpu,
        "tokens_per_s_per_gpu_after": new.predicted.tokens_per_s_per_gpu,
        "throughput_per_gpu_kept": r.kept_throughput, "work": work,
    }
