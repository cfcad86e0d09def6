"""Analytical cost table: roofline times from FLOPs and bytes, no device needed.

Per layer and microbatch on one GPU, against the GPU preset and the cluster's network;
the parts live in ``profiler.cost_model`` (GEMMs, token mixers, all-to-all and TP
collectives, optimizer). Element-wise work is memory bound; input-gradient FLOPs equal
the forward's matmul FLOPs (dX = dY W^T) plus the attention core's backward,
weight-gradient FLOPs the forward's matmul FLOPs (dW = X^T dY); MoE layers receive
``local tokens x top_k x imbalance`` copies (``capacity_load`` under Megatron's capacity
mode); activation bytes follow Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models"), less what recomputation drops;
``OV[a, b]`` comes from ``profiler.overlap_dag``. The whole model, term by term, is in
docs/costs.md ("The cost table and the analytical model").
"""

from __future__ import annotations

from dataclasses import replace

from planner.core.cluster import ClusterSpec
from planner.core.cuda_graphs import moe_host_graphed
from planner.core.costs import CostTable, LayerCost, P2PCost
from planner.core.errors import InputError
from planner.core.layer_math import ParamCount, layer_forward_flops, layer_params
from planner.core.model import LayerSpec, ModelSpec
from planner.core.offload import CHOICE_SEP, offload_modules
from planner.core.op_sac import ATTENTION_MATMULS, OP, op_layer, shapes
from planner.core.recompute import is_module_set, modules_of
from profiler.cost_model.fitted import FittedConstants, active_constants
from profiler.cost_model.context import CostContext
from profiler.cost_model.mixer import mixer_cost
from profiler.cost_model.offload import OffloadTerm, module_input_bytes, offload_term
from profiler.cost_model.recompute_modules import LayerPieces, apply_modules, up_proj_pieces
from profiler.overlap_dag import LayerTasks, overlapped_time
from profiler.routing_scale import layer_imbalance

__all__ = ["analytical_costs", "capacity_load", "state_bytes"]


def _decoder_tasks(ctx: CostContext, layer: LayerSpec, imbalance: float):
    """LayerTasks (F and I split into sub-tasks), W time, saved elems, W-kept elems.

    Element-wise work (norms, activations, residuals, rotary, routing bookkeeping, token
    permutation) runs at ``ctx.mem`` (HBM bandwidth x 0.8); the attention core's backward
    is 2.5x its forward. MoE dispatch and combine follow ``cost_model.comm``; expert tensor
    parallelism adds an all-gather and a reduce-scatter of the expert tokens in the etp
    group; a fixed per-layer overhead (``FittedConstants.moe_layer_overhead_s``) is charged
    in forward and backward unless the MoE preprocessing runs in CUDA graphs
    (``training.cuda_graphs`` / ``cuda_graph_scope``: ``planner.core.cuda_graphs.moe_host_graphed``).
    Saved activations are BF16, except that FP8 recipes save
    the matmul inputs in FP8 (Transformer Engine caches the FP8 cast for the backward);
    selective recomputation re-runs the attention core and element-wise work in the
    input-gradient, full recomputation the whole forward, its all-to-alls included.
    """
    m, T, tp = ctx.model, ctx.tokens, ctx.tp
    h, local = m.hidden, ctx.local
    recompute = ctx.cluster.training.recompute
    mix = mixer_cost(ctx, layer)
    saved, w_in = mix.saved, mix.w_in
    elementwise = ctx.mem(10 * local * h * ctx.bpe)  # 2 norms, 2 residual adds, rotary, gates
    attn_f = mix.proj_s + mix.core_f_s + elementwise + ctx.tp_comm() / 2
    attn_b = mix.proj_s + mix.core_b_s + 2 * elementwise + ctx.tp_comm() / 2
    w = mix.proj_s
    shared_f = mlp_f = dispatch = combine = 0.0
    pieces = {"local_h": local * h, "bpe": ctx.bpe, "norm_s": ctx.mem(2 * local * h * ctx.bpe),
              "core_f_s": mix.core_f_s if layer.mixer in ("gqa", "mla") else 0.0, **up_proj_pieces(ctx, layer)}
    if layer.ffn == "dense":
        flops = 2 * T * 3 * h * m.intermediate / tp
        mlp_f = ctx.gemm(flops, T, m.intermediate / tp, h) + ctx.mem(3 * T * m.intermediate * ctx.bpe / tp)
        w += ctx.gemm(flops, T, m.intermediate / tp, h)
        saved += T * (h + 3 * m.intermediate / tp)
        w_in += T * (h + m.intermediate / tp)
        pieces.update(mlp_f_s=mlp_f, mlp_saved=T * 3 * m.intermediate / tp, mlp_w_in=T * m.intermediate / tp)
    else:
        moe, etp = m.moe, ctx.cluster.parallel.etp
        copies = local * moe.top_k * imbalance  # token copies on the busiest GPU
        per_expert = copies * etp * ctx.ep / moe.num_experts
        inter = moe.expert_intermediate / etp
        e_flops = 2 * copies * 3 * h * moe.expert_intermediate
        experts = ctx.gemm(e_flops, per_expert, inter, h, grouped=True)
        host = 0.0 if moe_host_graphed(ctx.cluster.training) else ctx.cal.moe_layer_overhead_s
        permute = ctx.mem(2 * (local + copies) * h * ctx.bpe) + host
        mlp_f = experts + ctx.mem(3 * copies * inter * ctx.bpe) + ctx.etp_comm(copies)
        router = ctx.gemm(2 * local * h * moe.num_experts, local, moe.num_experts, h, block=False)
        attn_f += router + ctx.mem(local * moe.num_experts * 4 * 3) + permute
        attn_b += permute
        w += experts + router
        if moe.shared_intermediate:
            s_flops = 2 * T * 3 * h * moe.shared_intermediate / tp
            shared_f = (ctx.gemm(s_flops, T, moe.shared_intermediate / tp, h)
                        + ctx.mem(3 * T / tp * moe.shared_intermediate * ctx.bpe))
            w += ctx.gemm(s_flops, T, moe.shared_intermediate / tp, h)
            saved += T / tp * 3 * moe.shared_intermediate
            w_in += T / tp * (h + moe.shared_intermediate)
            pieces.update(shared_f_s=shared_f, shared_saved=T / tp * 3 * moe.shared_intermediate,
                          shared_w_in=T / tp * moe.shared_intermediate)
        dispatch, combine = ctx.dispatch(local * imbalance), ctx.combine(local * imbalance)
        saved += local * (h + moe.num_experts * 2) + copies * (2 * h + 3 * inter)
        w_in += local * h + copies * (h + inter)
        pieces.update(act_s=ctx.mem(3 * copies * inter * ctx.bpe), act_saved=copies * inter,
                      moe_f_s=mlp_f + router + permute, a2a_s=dispatch + combine,
                      moe_saved=local * moe.num_experts * 2 + copies * (2 * h + 3 * inter),
                      moe_w_in=copies * (h + inter))
    if layer.role == "mtp":
        extra = 2 * T * (2 * h * h + h * m.vocab) / tp
        attn_f += ctx.gemm(extra, T, h, h, block=False)
        attn_b += ctx.gemm(extra, T, h, h, block=False)
        w += ctx.gemm(extra, T, h, h, block=False)
        saved += T * (3 * h + m.vocab / tp)
        w_in += T * 3 * h
    tasks = LayerTasks(attn_f=attn_f, shared_f=shared_f, mlp_f=mlp_f, dispatch_f=dispatch,
                       combine_f=combine, attn_b=attn_b, shared_b=shared_f, mlp_b=mlp_f,
                       dispatch_b=combine, combine_b=dispatch)
    if recompute == "selective":  # core attention and element-wise work recomputed
        tasks = replace(tasks, attn_b=attn_b + mix.core_f_s + elementwise)
        saved -= (saved - w_in) * 0.5
    work = 0.0
    if recompute == OP:
        tasks, kept = _op_recompute(ctx, layer, tasks, elementwise)
        return tasks, w, kept, w_in, max(saved - kept, 0.0) * ctx.bpe
    if is_module_set(recompute):
        tasks, saved, w_in, work = apply_modules(modules_of(recompute), LayerPieces(**pieces), tasks, saved, w_in)
        return tasks, w, saved, w_in, work
    if recompute == "full":  # the whole forward again, its dispatch and combine all-to-alls included
        tasks = replace(tasks, attn_b=attn_b + attn_f, mlp_b=mlp_f * 2, shared_b=shared_f * 2,
                        dispatch_b=combine + dispatch, combine_b=dispatch + combine)
        # the recomputed forward re-materialises what the layer would have saved, for as long
        # as its backward runs (Megatron CheckpointFunction, torch.utils.checkpoint)
        work = saved * ctx.bpe
        saved, w_in = T * h / tp, T * h / tp
    return tasks, w, saved, w_in, work


def _op_recompute(ctx: CostContext, layer: LayerSpec, tasks: LayerTasks, elementwise: float):
    """torchtitan's per-op checkpointing (``planner.core.op_sac``): the tasks with the
    recomputed matmuls, element-wise work and (tensor parallel) all-gathers added to the
    input-gradient halves, and the elements kept. The recomputed rest of one layer is
    re-materialised for as long as its backward runs, as under full recomputation."""
    m, T, tp = ctx.model, ctx.tokens, ctx.tp
    a = m.attention
    q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    op = op_layer(hidden=m.hidden, q=q, kv=kv, heads=a.num_heads, ffn=m.intermediate, tp=tp)
    dims = shapes(hidden=m.hidden, q=q, kv=kv, ffn=m.intermediate)

    def again(name: str) -> float:
        n_out, n_in, row = dims[name]
        n, k = (n_out, n_in / tp) if row else (n_out / tp, n_in)
        return ctx.gemm(2 * T * n * k, T, n, k)

    gather = ctx.tp_comm() / 4 if op.gathers_again else 0.0  # one of the layer's two all-gathers each
    attn = sum(again(n) for n in op.recomputed if n in ATTENTION_MATMULS) + elementwise + gather
    mlp = (sum(again(n) for n in op.recomputed if n not in ATTENTION_MATMULS)
           + ctx.mem(3 * T * m.intermediate * ctx.bpe / tp) + gather)
    return replace(tasks, attn_b=tasks.attn_b + attn, mlp_b=tasks.mlp_b + mlp), T * op.kept_per_token


def _end_tasks(ctx: CostContext, layer: LayerSpec):
    m, T, tp = ctx.model, ctx.tokens, ctx.tp
    h, v = m.hidden, m.vocab
    if layer.role == "embedding":
        f = ctx.mem(2 * T * h * ctx.bpe / tp)
        return LayerTasks(attn_f=f, attn_b=0.0), ctx.mem(T * h * 4 / tp * 2), T * 4 / ctx.bpe, 0.0
    flops = 2 * T * h * v / tp
    head = ctx.gemm(flops, T, v / tp, h, block=False)
    ce = ctx.mem(LOSS_PASS_BYTES[ctx.cross_entropy] * T * v / tp)
    f = head + ce + ctx.mem(2 * T * h * ctx.bpe / tp)
    tasks = LayerTasks(attn_f=f, attn_b=head + ce)
    # saved: the head's input and what the loss keeps (LOSS_SAVED_BYTES), in BF16 elements
    return tasks, head, T * (h + LOSS_SAVED_BYTES[ctx.cross_entropy] / 2 * v / tp), T * h


# [Note: FSDP under a pipeline]
# FSDP with pipeline parallelism (torch.distributed.pipelining + FSDP2, as torchtitan
# runs it): the stage's weights are gathered once and kept until its last microbatch's backward
# (torchtitan ``apply_fsdp``: ``reshard_after_forward = False`` when PP is on, "to avoid
# per-microbatch all-gathers"), and gradients are reduce-scattered only after the last
# microbatch (the pipeline stage runs the others under ``set_requires_gradient_sync(False)``,
# torch/distributed/pipelining/stage.py ``backward_maybe_with_nosync``); meanwhile FSDP2
# accumulates each unsharded gradient in its reduce dtype, FP32 (torch/distributed/fsdp/
# _fully_shard/_fsdp_param.py ``to_accumulated_grad_if_needed``). So each GPU holds 2 + 4 bytes
# per parameter of its stages beside the sharded state.

LOSS_WORK_BYTES = {"fused": 2, "eager": 8, "compiled": 2}
"""Bytes per logit the loss's backward allocates beyond the FP32 softmax it saved. Megatron's
vocab-parallel cross entropy writes the gradient into its saved softmax in place and casts
it to BF16 for the head (2 bytes; megatron/core/tensor_parallel/cross_entropy.py
``_VocabParallelCrossEntropy.backward``); PyTorch's eager ``F.cross_entropy(logits.float())``
(torchtitan/components/loss.py) creates the NLL gradient and the log-softmax gradient, both
FP32, while the saved log-softmax is still alive (8 bytes; the BF16 cast comes after the
first of them is freed); compiled, the same loss under ``torch.compile``, writes the BF16
gradient in one fused kernel (2 bytes). torchtitan compiles its loss with ``training.compile``
from commit e10cb9494 (October 2024), not from e8977b007 (December 2024: "compiling loss
function causes CUDA errors") until bbb1b616e (April 2025, ``build_cross_entropy_loss``)."""

LOSS_SAVED_BYTES = {"fused": 4, "eager": 4, "compiled": 2}
"""Bytes per logit the loss keeps for its backward: the FP32 softmax (Megatron's fused loss)
or log-softmax (eager ``F.cross_entropy(logits.float())``: the upcast copy itself is freed,
``ToCopyBackward`` saves nothing); compiled, the BF16 logits, since AOTAutograd's min-cut
partitioner keeps the smaller input and recomputes the softmax in the backward (torchtitan
docs/composability.md, "On upcasting the final output to fp32": the casts "can be fused with
the loss forward and backward respectively when we torch.compile() the loss function")."""

LOSS_PASS_BYTES = {"fused": 12, "eager": 12, "compiled": 4}
"""Bytes per logit the loss moves through memory in its forward and again in its backward:
three FP32 passes (upcast, softmax, its gradient); compiled, one fused kernel reading and
writing BF16 each way."""


def loss_work_bytes(ctx: CostContext) -> float:
    """Transient bytes of the loss's backward (``LOSS_WORK_BYTES`` by ``cross_entropy``)."""
    return LOSS_WORK_BYTES[ctx.cross_entropy] * ctx.tokens * ctx.model.vocab / ctx.tp


def state_bytes(params: ParamCount, cluster: ClusterSpec) -> tuple[float, float, float]:
    """(parameter, gradient, optimizer-state) bytes one GPU holds for a layer of ``params``:
    BF16 weights; FP32 gradients (BF16 without ``grad_reduce_in_fp32``) and 12 bytes of FP32 master weights and Adam moments per
    parameter, or with ``param_dtype: bf16`` BF16 gradients and 4 bytes of BF16 moments (no
    master copy: ``TrainingSpec.param_dtype``); the distributed optimizer shards the optimizer
    state over the (expert) data-parallel group, FSDP the weights and gradients too."""
    par, tr = cluster.parallel, cluster.training
    dense_gpu, expert_gpu = params.dense / par.tp, params.expert / (par.ep * par.etp)
    dp_group = par.dp * par.cp
    edp_group = max(par.dp * par.cp * par.tp // (par.ep * par.etp), 1)
    dp_shard, edp_shard = (dp_group, edp_group) if tr.distributed_optimizer or tr.fsdp else (1, 1)
    weights = dense_gpu / dp_shard + expert_gpu / edp_shard if tr.fsdp else dense_gpu + expert_gpu
    # FSDP under a pipeline keeps each stage's gathered BF16 weights and its unsharded FP32
    # gradients from the first microbatch to the last ([Note: FSDP under a pipeline]); experts
    # AutoModel leaves out of FSDP (``fsdp_experts: ep_shard`` on a one-rank ep_shard mesh) are
    # never gathered and accumulate their gradient in place
    gathered_experts = tr.fsdp_experts == "shard" or edp_group > 1
    held = dense_gpu + (expert_gpu if gathered_experts else 0.0) if tr.fsdp and par.pp > 1 else 0.0
    grad_b, optim_b = (4, 12) if tr.param_dtype == "fp32" else (2, 4)
    grad_b = grad_b if tr.grad_reduce_in_fp32 else 2
    return (weights * 2 + held * 2, weights * grad_b + held * 4,
            dense_gpu * optim_b / dp_shard + expert_gpu * optim_b / edp_shard)


def _layer_cost(ctx: CostContext, layer: LayerSpec, imbalance: float) -> tuple[LayerCost, LayerTasks]:
    if layer.role in ("embedding", "head"):
        tasks, w, saved, w_in = _end_tasks(ctx, layer)
        work = loss_work_bytes(ctx) if layer.role == "head" else 0.0
    else:
        tasks, w, saved, w_in, work = _decoder_tasks(ctx, layer, imbalance)
    par, tr = ctx.cluster.parallel, ctx.cluster.training
    param_b, grad_b, optim_b = state_bytes(layer_params(layer, ctx.model), ctx.cluster)
    # Transformer Engine keeps matmul inputs in FP8 for the backward (1 byte instead of 2;
    # torchao keeps them in BF16); a full recompute's checkpoint is the layer input in BF16
    fp8_saved = ctx.fp8_saves_inputs and tr.recompute != "full"
    act = saved * ctx.bpe - (min(w_in, saved) if fp8_saved else 0.0)
    act_w = min(w_in * (1 if fp8_saved else ctx.bpe), act)
    off = _offload(ctx, layer, imbalance, act, act_w, tasks, w, fp8_saved)
    if off != OffloadTerm():
        act_w = (act_w - off.moved_w) * off.keep
        act = (act - off.moved) * off.keep
        work += off.resident
        tasks = replace(tasks, attn_f=tasks.attn_f + off.f_s, attn_b=tasks.attn_b + off.b_s)
    cost = LayerCost(
        type=layer.type_key if imbalance == 1.0 else f"{layer.type_key}@{layer.index}",
        role=layer.role,
        f=tasks.forward - (tasks.dispatch_f + tasks.combine_f),
        i=tasks.backward - (tasks.dispatch_b + tasks.combine_b),
        w=w,
        a2a_f=tasks.dispatch_f + tasks.combine_f,
        a2a_b=tasks.dispatch_b + tasks.combine_b,
        act_bytes=int(act),
        act_w_bytes=int(act_w),
        param_bytes=int(param_b),
        grad_bytes=int(grad_b),
        optim_bytes=int(optim_b),
        work_bytes=int(work),
        out_bytes=int(ctx.tokens * ctx.model.hidden * ctx.bpe / par.tp),
        flops=3.0 * ctx.tokens * layer_forward_flops(layer, ctx.model, tr.seq_len),
        imbalance=imbalance,
    )
    return cost, tasks


def _offload(ctx: CostContext, layer: LayerSpec, imbalance: float, act: float, act_w: float,
             tasks: LayerTasks, w: float, fp8_saved: bool) -> OffloadTerm:
    """The decoder layer's ``OffloadTerm`` under ``training.offload`` (``cost_model.offload``):
    the copies hide behind the layer's compute, forward against F, backward against I + W."""
    mode, m = ctx.cluster.training.offload, ctx.model
    if mode == "none" or layer.role != "decoder":
        return OffloadTerm()
    copies = ctx.local * m.moe.top_k * imbalance if layer.is_moe and m.moe else 0.0
    inter = m.moe.expert_intermediate / ctx.cluster.parallel.etp if m.moe else 0.0
    modules = module_input_bytes(offload_modules(mode), local_h=ctx.local * m.hidden, copies_h=copies * m.hidden,
                                 copies_2inter=copies * 2 * inter, bpe=ctx.bpe, fp8_inputs=fp8_saved)
    compute_f = tasks.forward - (tasks.dispatch_f + tasks.combine_f)
    compute_b = tasks.backward - (tasks.dispatch_b + tasks.combine_b) + w
    return offload_term(mode, act=act, act_w=act_w, decoders=sum(1 for x in m.layers if x.role == "decoder"),
                        host_bandwidth=ctx.cluster.gpu.host_bandwidth, f_s=compute_f, b_s=compute_b,
                        modules=modules)


def analytical_costs(model: ModelSpec, cluster: ClusterSpec, *,
                     imbalance: list[float] | None = None,
                     contention: float | None = None,
                     size_curve_sizes: tuple[int, ...] = (1, 2, 4, 8),
                     constants: FittedConstants | None = None, pairs: bool = True) -> CostTable:
    """Cost table for ``model`` on ``cluster`` at its micro-batch size.

    A table is for one recomputation mode; ``recompute: auto`` (the planner's choice, made
    per table by ``planner.planning.cost_tables``) is costed as ``none`` here.

    ``imbalance[l]`` (busiest EP rank load / mean, default 1) scales layer l's expert
    compute and all-to-all volume; layers with imbalance != 1 get their own type key.
    ``contention`` (slowdown of compute overlapped with communication) defaults to the
    cluster dispatcher's SM share; ``constants`` to the active fitted constants
    (``profiler.cost_model.fitted.active_constants``). ``pairs=False`` skips the overlap pair costs (a
    screening table: ``ov`` falls back to serial).
    """
    if cluster.training.recompute == "auto":
        cluster = cluster.with_recompute("none")
    elif len(cluster.training.recompute_modes()) > 1:
        raise InputError("training.recompute", "a cost table is for one module set, this names "
                         f"{len(cluster.training.recompute_modes())}", "give one list of modules")
    if CHOICE_SEP in cluster.training.offload:
        raise InputError("training.offload", "a cost table is for one offloading mode, this names "
                         f"{len(cluster.training.offload.split(CHOICE_SEP))}", "give one mode")
    constants = constants or active_constants()
    if contention is None:
        contention = cluster.network.kind.sm_share
    mbs = cluster.training.micro_batch_size
    table = _table(model, cluster, mbs, imbalance, contention, constants, pairs=pairs)
    base = _serial_total(table)
    curve = tuple((s, _serial_total(_table(model, cluster, s, imbalance, contention, constants,
                                           pairs=False)) / base)
                  for s in sorted(set(size_curve_sizes) | {mbs}))
    return replace(table, size_curve=curve)


def _serial_total(t: CostTable) -> float:
    return sum(lc.f + lc.i + lc.w for lc in t.layers)


def capacity_load(imbalance: float, cluster: ClusterSpec) -> float:
    """The busiest rank's expert load / mean under Megatron's capacity mode
    (``training.moe_expert_capacity_factor`` C; megatron/core/transformer/moe/moe_utils.py
    ``get_capacity``, ``apply_router_token_dropping``): each expert keeps at most C times
    its mean share of copies, so a rank's load is at most C x mean (``min(imbalance, C)``);
    padded to capacity (``moe_pad_expert_input_to_capacity``), every expert computes and
    sends exactly its capacity, C x mean, however the tokens were routed. Dropless: the
    routing imbalance as given."""
    t = cluster.training
    c = t.moe_expert_capacity_factor
    if c is None:
        return imbalance
    return c if t.moe_pad_expert_input_to_capacity else min(imbalance, c)


def _table(model: ModelSpec, cluster: ClusterSpec, mbs: int, imbalance: list[float] | None,
           contention: float, cal: FittedConstants, pairs: bool = True) -> CostTable:
    ctx = CostContext(model, cluster, mbs * cluster.training.seq_len / cluster.parallel.cp, cal)
    imb = imbalance or layer_imbalance(model, None)
    layers, tasks = [], {}
    for layer in model.layers:
        cost, t = _layer_cost(ctx, layer, capacity_load(imb[layer.index], cluster) if layer.is_moe else 1.0)
        layers.append(cost)
        tasks[cost.type] = t
    ov = {}
    if pairs:
        for ta, fa in tasks.items():
            for tb, fb in tasks.items():
                ov[(ta, tb)] = overlapped_time(fa, fb, contention=contention)
    gpu, par = cluster.gpu, cluster.parallel
    cross_node = par.tp * par.cp * par.dp >= cluster.gpus_per_node
    return CostTable(
        model=model.name, source="analytical", layers=tuple(layers), pairs=ov,
        p2p=P2PCost(latency_s=gpu.p2p_latency_s,
                    bandwidth=cluster.network_bandwidth if cross_node else cluster.nvlink_bandwidth),
        microbatch_size=mbs, seq_len=cluster.training.seq_len, device=gpu.name, scale=1.0,
        meta={"contention": contention, "eff_max": cal.gemm_eff_max, "gemm_dim_half": cal.gemm_dim_half,
              "recompute": cluster.training.recompute,
              **({"offload": cluster.training.offload} if cluster.training.offload != "none" else {}),
              "precision": cluster.training.precision,
              "dispatcher": cluster.network.dispatcher,
              "parallel": {"tp": par.tp, "ep": par.ep, "dp": par.dp, "cp": par.cp, "etp": par.etp}},
    )
