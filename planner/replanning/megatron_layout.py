"""Which global rank logged which layers and experts, from the plan (Megatron's rank order).

Megatron-LM ``megatron/core/parallel_state.py``, ``initialize_model_parallel``: global
ranks are numbered by a ``RankGenerator`` over an order string whose first entry varies
fastest (``generate_masked_orthogonal_rank_groups``: rank = sum of index x stride, strides
the running product of the sizes in order). ``megatron/training/initialize.py`` passes
``tp-cp-ep-dp-pp``, or ``tp-cp-ep-pp-dp`` under ``--use-tp-pp-dp-mapping``. Attention
layers use (tp, cp, dp, pp) with ep 1; expert layers decompose the same ranks again with
(etp, ep, edp, pp) and cp 1, with edp = world / (etp x ep x pp). Megatron's own default
for ``--expert-tensor-parallel-size`` is tp; ppplan reads the plan's ``parallel.etp`` (what
its Megatron export passes), 1 when the plan has none, unless told otherwise.
The pipeline groups of both decompositions are the same (asserted there).

Layers: stage i of ``--pipeline-model-parallel-layout`` is model chunk i // pp on pipeline
rank i % pp (loop placement); each chunk has its own decoder block whose layers are
numbered from 0 (dense layers included), and its own MTP block. Forward calls on a rank
follow ``get_schedule_table(M, vpp, group)`` in ``megatron/core/pipeline_parallel/schedules.py``
with the group size ppplan's export sets (``--microbatch-group-size-per-virtual-pipeline-stage pp``);
``forward_backward_pipelining_with_interleaving`` runs ``get_pp_rank_microbatches``' warm-up
forwards, then one forward and one backward per steady step, then the remaining backwards
(backward k on chunk ``vpp - 1 -`` the table's chunk k, ``get_model_chunk_id(k, forward=False)``).
"""

from __future__ import annotations

from planner.core.errors import InputError
from planner.core.model import ModelSpec
from planner.core.plan import Plan
from profiler.megatron_tpe import RankCoords, TpeKey, TpeLayout

__all__ = ["ORDERS", "megatron_layout", "tpe_layout", "local_layers", "rank_coords", "schedule_table",
           "recompute_calls"]

ORDERS = {False: "tp-cp-ep-dp-pp", True: "tp-cp-ep-pp-dp"}
"""Megatron's rank order without / with ``--use-tp-pp-dp-mapping``."""


def megatron_layout(plan: Plan, model: ModelSpec, *, tp_pp_dp_mapping: bool = False,
                    expert_tp: int | None = None) -> TpeLayout:
    """The layout of the Megatron run ``plan`` describes (see the module doc)."""
    par = plan.parallel
    placement = par.placement_style
    if placement != "loop":
        raise InputError("plan.parallel.placement", f"{placement!r}: Megatron places stages in loop order "
                         "only", "read Megatron logs against a loop-placement plan")
    pp = int(par.pp)
    for stage in plan.stages:
        if stage.rank != stage.stage % pp:
            raise InputError(f"plan.stages[{stage.stage}].rank", f"{stage.rank}, Megatron puts stage "
                             f"{stage.stage} on pipeline rank {stage.stage % pp}",
                             "read Megatron logs against a plan Megatron can run")
    etp = par.etp_size if expert_tp is None else expert_tp
    return tpe_layout(model, bounds=plan.bounds(), pp=pp, vpp=int(par.vpp), tp=int(par.tp),
                      cp=par.cp_size, ep=int(par.ep), dp=int(par.dp),
                      microbatches=plan.num_microbatches, order=ORDERS[tp_pp_dp_mapping], expert_tp=etp)


def tpe_layout(model: ModelSpec, *, bounds: list[tuple[int, int]], pp: int, vpp: int, tp: int, ep: int, dp: int,
               microbatches: int, cp: int = 1, order: str = ORDERS[False], expert_tp: int | None = None
               ) -> TpeLayout:
    """Layout for stage ``bounds`` (stage i on pipeline rank i % pp); ``expert_tp`` defaults to tp."""
    if model.moe is None:
        raise InputError("model", f"{model.name} has no MoE layers", "tokens-per-expert logs need an MoE model")
    if model.moe.num_experts % ep:
        raise InputError("plan.parallel.ep", f"{ep} does not divide {model.moe.num_experts} experts")
    etp = tp if expert_tp is None else expert_tp
    world = pp * tp * cp * dp
    if etp < 1 or world % (etp * ep * pp):
        raise InputError("plan.parallel", f"world {world} is not divisible by etp x ep x pp = {etp * ep * pp}",
                         "Megatron needs tp x cp x dp divisible by ep x expert tp")
    edp = world // (etp * ep * pp)
    if not order.endswith("pp") and pp > 1 and edp != dp:
        # initialize_model_parallel asserts this for orders that do not end in pp.
        raise InputError("--use-tp-pp-dp-mapping", f"expert data-parallel size {edp} differs from dp {dp}, "
                         "which Megatron refuses for this rank order", "check the run's flags")
    sizes = {"tp": etp, "cp": 1, "ep": ep, "dp": edp, "pp": pp}
    coords = [rank_coords(r, order, sizes) for r in range(world)]
    ranks = tuple(RankCoords(pp=c["pp"], ep=c["ep"], edp=c["dp"], etp=c["tp"]) for c in coords)
    moe: list[dict[TpeKey, list[tuple[int, int]]]] = [{} for _ in range(pp)]
    block: list[dict[str, int]] = [{} for _ in range(pp)]
    for stage, names in enumerate(local_layers(model, bounds)):
        rank, chunk = stage % pp, stage // pp
        counters = {"decoder": 0, "mtp": 0}
        for index, role, local in names:
            if role not in counters:
                continue
            counters[role] += 1
            if model.layers[index].is_moe:
                key = ("decoder", -1, local) if role == "decoder" else ("mtp", local, 0)
                moe[rank].setdefault(key, []).append((chunk, index))
        for name, count in counters.items():
            block[rank][name] = max(block[rank].get(name, 0), count)
    describe = f"pp {pp} x tp {tp} x cp {cp} x dp {dp}, ep {ep}, expert tp {etp}, expert dp {edp}, order {order}"
    return TpeLayout(world_size=world, describe=describe, ranks=ranks,
                     local_experts=model.moe.num_experts // ep, microbatches=microbatches,
                     forward_calls=tuple(schedule_table(microbatches, vpp, pp)),
                     recompute_calls=tuple(tuple(recompute_calls(microbatches, vpp, pp, rank)) for rank in range(pp)),
                     moe_layers=tuple({k: tuple(v) for k, v in m.items()} for m in moe), block_sizes=tuple(block))


def local_layers(model: ModelSpec, bounds: list[tuple[int, int]]) -> list[list[tuple[int, str, int]]]:
    """Per stage, ``(global layer index, role, local index)`` of each layer: Megatron numbers a
    chunk's decoder layers and its MTP layers from 0 in their own blocks (module doc); the
    embedding and the loss head are local index 0 of their stage."""
    out = []
    for a, b in bounds:
        counters: dict[str, int] = {}
        stage = []
        for layer in model.layers[a:b]:
            stage.append((layer.index, layer.role, counters.get(layer.role, 0)))
            counters[layer.role] = counters.get(layer.role, 0) + 1
        out.append(stage)
    return out


def rank_coords(rank: int, order: str, sizes: dict[str, int]) -> dict[str, int]:
    """Index of ``rank`` along each dimension of ``order`` (first entry varies fastest)."""
    out, stride = {}, 1
    for name in order.split("-"):
        out[name] = (rank // stride) % sizes[name]
        stride *= sizes[name]
    return out


def schedule_table(microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) of each forward call on a rank, Megatron's ``get_schedule_table``."""
    table = []
    for low in range(0, microbatches, group):
        high = microbatches if low + group >= microbatches else low + group
        table += [(mb, ch) for ch in range(chunks) for mb in range(low, high)]
    return table


def recompute_calls(microbatches: int, chunks: int, pp: int, rank: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) of every forward call on pipeline ``rank`` when each backward first
    re-runs its forward (full recomputation), in Megatron's interleaved order (module doc)."""
    table = schedule_table(microbatches, chunks, pp)
    total = len(table)
    # Without virtual stages Megatron runs forward_backward_pipelining_without_interleaving:
    # pp - rank - 1 warm-up forwards.
    warmup = min(total, (pp - rank - 1) * 2 + (chunks - 1) * pp if chunks > 1 else pp - rank - 1)
    backward = [(mb, chunks - 1 - ch) for mb, ch in table]
    calls = table[:warmup]
    for k in range(total - warmup):
        calls += [table[warmup + k], backward[k]]
    return calls + backward[total - warmup:]
