"""Analytical cost table: roofline times from FLOPs and bytes, no device needed.

Per layer and microbatch of T = micro_batch_size x seq_len tokens on one GPU:

- Matmul time = FLOPs / (peak x eff(m)), with eff(m) = EFF_MAX x m / (m + M_HALF) for a
  GEMM whose token dimension is m: big GEMMs reach EFF_MAX = 0.75 of peak (typical
  of H100 BF16 cuBLAS on transformer shapes), a GEMM with M_HALF = 128 rows reaches
  half of that. This is what makes small microbatches and thinly spread experts slower
  per token. Attention cores use FLASH_EFF = 0.5 (FlashAttention-2/3 forward on H100 is
  reported at 50-75% of peak; backward lower), the chunked linear-attention kernel
  LINEAR_EFF = 0.3.
- Element-wise work (norms, activations, residuals, rotary, routing bookkeeping) is
  memory bound: bytes / (HBM bandwidth x 0.8).
- Backward: input-gradient FLOPs = forward FLOPs for every matmul (dX = dY W^T) plus
  2.5x the attention core (FlashAttention backward recomputes scores); weight-gradient
  FLOPs = forward matmul FLOPs (dW = X^T dY). Recomputation adds forward work to I.
- MoE: each GPU receives T x top_k x (busiest-rank load / mean) token copies
  (the straggler sets the pace); dispatch and combine each move
  T x top_k x hidden x bytes x (ep-1)/ep through the EP all-to-all bandwidth
  (intranode when the EP group fits in a node, else internode), plus 30 us latency.
- Tensor parallelism with sequence parallelism: two all-gathers and two
  reduce-scatters of T x hidden per layer, forward and backward, ring algorithm
  over NVLink, exposed.
- Activation bytes follow Korthikanti et al. 2022 (saved inputs of every matmul and
  nonlinearity), with recomputation dropping what is recomputed; the weight-gradient
  share (``act_w_bytes``) is the matmul inputs. Recomputed work is added to the
  input-gradient: selective re-runs the attention core and element-wise work; full
  re-runs the whole forward, MoE dispatch and combine all-to-alls included.
- Memory per parameter: weights (2 B) + fp32 gradients (4 B) + fp32 Adam master, m, v
  (12 B, divided by the data-parallel group with the distributed optimizer; experts
  by their own expert-data-parallel group dp x tp / ep).
- OV[a, b] comes from ``profiler.overlap_dag``.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.cluster import ClusterSpec
from planner.core.costs import CostTable, LayerCost, P2PCost
from planner.core.layer_math import layer_forward_flops, layer_params
from planner.core.model import LayerSpec, ModelSpec
from profiler.overlap_dag import DEFAULT_CONTENTION, LayerTasks, overlapped_time
from profiler.routing_scale import layer_imbalance

__all__ = ["analytical_costs", "EFF_MAX", "M_HALF", "FLASH_EFF", "LINEAR_EFF"]

EFF_MAX = 0.75
M_HALF = 128.0
FLASH_EFF = 0.5
LINEAR_EFF = 0.3
HBM_EFF = 0.8
A2A_LATENCY_S = 30e-6
LINEAR_CHUNK = 64


@dataclass(frozen=True)
class _Ctx:
    model: ModelSpec
    cluster: ClusterSpec
    tokens: int
    """Tokens per microbatch (T)."""

    @property
    def bpe(self) -> int:
        return self.cluster.training.bytes_per_element

    @property
    def tp(self) -> int:
        return self.cluster.parallel.tp

    @property
    def ep(self) -> int:
        return self.cluster.parallel.ep

    def gemm(self, flops: float, m: float) -> float:
        eff = EFF_MAX * m / (m + M_HALF)
        return flops / (self.cluster.gpu.peak_flops * eff) if flops else 0.0

    def mem(self, nbytes: float) -> float:
        return nbytes / (self.cluster.gpu.hbm_bandwidth * HBM_EFF)

    def a2a(self, nbytes: float) -> float:
        if self.ep == 1 or nbytes == 0:
            return 0.0
        gpu = self.cluster.gpu
        intra = self.ep * self.tp <= self.cluster.gpus_per_node
        bw = gpu.a2a_intranode_bandwidth if intra else gpu.a2a_internode_bandwidth
        return A2A_LATENCY_S + nbytes * (self.ep - 1) / self.ep / bw

    def tp_comm(self) -> float:
        """Two all-gathers + two reduce-scatters of T x hidden (ring over NVLink)."""
        if self.tp == 1:
            return 0.0
        nbytes = self.tokens * self.model.hidden * self.bpe
        return 4 * (self.tp - 1) / self.tp * nbytes / self.cluster.gpu.nvlink_bandwidth


def _mixer(ctx: _Ctx, layer: LayerSpec) -> tuple[float, float, float, float, float]:
    """(proj flops, core fwd time, core bwd time, saved activation elems, matmul-input elems)."""
    m, T, tp = ctx.model, ctx.tokens, ctx.tp
    h = m.hidden
    seq = ctx.cluster.training.seq_len
    peak = ctx.cluster.gpu.peak_flops
    if layer.mixer == "gqa":
        a = m.attention
        q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
        gated = m.linear is not None
        proj = 2 * T * (h * (q * (2 if gated else 1) + 2 * kv) + q * h) / tp
        core = 2 * T * a.num_heads * 2 * a.head_dim * seq / 2 / tp  # causal: half the scores
        saved = T * (h + q + 2 * kv + q + (q if gated else 0)) / tp
        w_in = T * (h + q) / tp
    elif layer.mixer == "mla":
        a = m.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        proj = 2 * T * (h * a.q_lora_rank + a.q_lora_rank * a.num_heads * qk
                        + h * (a.kv_lora_rank + a.qk_rope_head_dim)
                        + a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
                        + a.num_heads * a.v_head_dim * h) / tp
        core = 2 * T * a.num_heads * (qk + a.v_head_dim) * seq / 2 / tp
        saved = T * (h + a.q_lora_rank + a.kv_lora_rank
                     + a.num_heads * (2 * qk + 2 * a.v_head_dim) / tp)
        w_in = T * (h + a.q_lora_rank + a.kv_lora_rank + a.num_heads * a.v_head_dim / tp)
    else:
        lin = m.linear
        qk, v = lin.num_key_heads * lin.key_head_dim, lin.num_value_heads * lin.value_head_dim
        proj = 2 * T * (h * (2 * qk + 2 * v + 2 * lin.num_value_heads) + v * h) / tp
        core = 2 * T * lin.num_value_heads * (2 * lin.key_head_dim * lin.value_head_dim
                                             + LINEAR_CHUNK * (lin.key_head_dim + lin.value_head_dim)) / tp
        states = T / LINEAR_CHUNK * lin.num_value_heads * lin.key_head_dim * lin.value_head_dim * 2
        saved = (T * (h + 2 * (2 * qk + v) + 3 * v) + states) / tp
        w_in = T * (h + v) / tp
        return proj, core / (peak * LINEAR_EFF), 2.5 * core / (peak * LINEAR_EFF), saved, w_in
    return proj, core / (peak * FLASH_EFF), 2.5 * core / (peak * FLASH_EFF), saved, w_in


def _decoder_tasks(ctx: _Ctx, layer: LayerSpec, imbalance: float):
    """LayerTasks (F and I split into sub-tasks), W time, saved elems, W-kept elems."""
    m, T, tp = ctx.model, ctx.tokens, ctx.tp
    h = m.hidden
    recompute = ctx.cluster.training.recompute
    proj, core_f, core_b, saved, w_in = _mixer(ctx, layer)
    elementwise = ctx.mem(10 * T * h * ctx.bpe / tp)  # 2 norms, 2 residual adds, rotary, gates
    attn_f = ctx.gemm(proj, T / tp) + core_f + elementwise + ctx.tp_comm() / 2
    attn_b = ctx.gemm(proj, T / tp) + core_b + 2 * elementwise + ctx.tp_comm() / 2
    w = ctx.gemm(proj, T / tp)
    shared_f = mlp_f = dispatch = 0.0
    if layer.ffn == "dense":
        flops = 2 * T * 3 * h * m.intermediate / tp
        mlp_f = ctx.gemm(flops, T / tp) + ctx.mem(3 * T * m.intermediate * ctx.bpe / tp)
        w += ctx.gemm(flops, T / tp)
        saved += T * (h + 3 * m.intermediate / tp)
        w_in += T * (h + m.intermediate / tp)
    else:
        moe = m.moe
        tok = T / tp * moe.top_k * imbalance  # token copies on the busiest GPU
        per_expert = tok * ctx.ep / moe.num_experts
        e_flops = 2 * tok * 3 * h * moe.expert_intermediate
        mlp_f = ctx.gemm(e_flops, per_expert) + ctx.mem(3 * tok * moe.expert_intermediate * ctx.bpe)
        attn_f += ctx.gemm(2 * T / tp * h * moe.num_experts, T / tp) + ctx.mem(T / tp * moe.num_experts * 4 * 3)
        w += ctx.gemm(e_flops, per_expert) + ctx.gemm(2 * T / tp * h * moe.num_experts, T / tp)
        if moe.shared_intermediate:
            s_flops = 2 * T / tp * 3 * h * moe.shared_intermediate
            shared_f = ctx.gemm(s_flops, T / tp) + ctx.mem(3 * T / tp * moe.shared_intermediate * ctx.bpe)
            w += ctx.gemm(s_flops, T / tp)
            saved += T / tp * 3 * moe.shared_intermediate
            w_in += T / tp * (h + moe.shared_intermediate)
        dispatch = ctx.a2a(T / tp * moe.top_k * imbalance * h * ctx.bpe)
        saved += T / tp * (h + moe.num_experts * 2) + tok * (2 * h + 3 * moe.expert_intermediate)
        w_in += T / tp * h + tok * (h + moe.expert_intermediate)
    if layer.role == "mtp":
        extra = 2 * T * (2 * h * h + h * m.vocab) / tp
        attn_f += ctx.gemm(extra, T / tp)
        attn_b += ctx.gemm(extra, T / tp)
        w += ctx.gemm(extra, T / tp)
        saved += T * (3 * h + m.vocab / tp)
        w_in += T * 3 * h
    tasks = LayerTasks(attn_f=attn_f, shared_f=shared_f, mlp_f=mlp_f, dispatch_f=dispatch,
                       combine_f=dispatch, attn_b=attn_b, shared_b=shared_f, mlp_b=mlp_f,
                       dispatch_b=dispatch, combine_b=dispatch)
    if recompute == "selective":  # core attention and element-wise work recomputed
        tasks = _with(tasks, attn_b=attn_b + core_f + elementwise)
        saved -= (saved - w_in) * 0.5
    elif recompute == "full":  # the whole forward again, its dispatch and combine all-to-alls included
        tasks = _with(tasks, attn_b=attn_b + attn_f, mlp_b=mlp_f * 2, shared_b=shared_f * 2,
                      dispatch_b=2 * dispatch, combine_b=2 * dispatch)
        saved, w_in = T * h / tp, T * h / tp
    return tasks, w, saved, w_in


def _with(t: LayerTasks, **kw: float) -> LayerTasks:
    from dataclasses import replace

    return replace(t, **kw)


def _end_tasks(ctx: _Ctx, layer: LayerSpec):
    m, T, tp = ctx.model, ctx.tokens, ctx.tp
    h, v = m.hidden, m.vocab
    if layer.role == "embedding":
        f = ctx.mem(2 * T * h * ctx.bpe / tp)
        return LayerTasks(attn_f=f, attn_b=0.0), ctx.mem(T * h * 4 / tp * 2), T * 4 / ctx.bpe, 0.0
    flops = 2 * T * h * v / tp
    ce = ctx.mem(3 * T * v / tp * 4)
    f = ctx.gemm(flops, T / tp) + ce + ctx.mem(2 * T * h * ctx.bpe / tp)
    tasks = LayerTasks(attn_f=f, attn_b=ctx.gemm(flops, T / tp) + ce)
    return tasks, ctx.gemm(flops, T / tp), T * (h + v / tp), T * h


def _layer_cost(ctx: _Ctx, layer: LayerSpec, imbalance: float) -> tuple[LayerCost, LayerTasks]:
    if layer.role in ("embedding", "head"):
        tasks, w, saved, w_in = _end_tasks(ctx, layer)
    else:
        tasks, w, saved, w_in = _decoder_tasks(ctx, layer, imbalance)
    par, tr = ctx.cluster.parallel, ctx.cluster.training
    params = layer_params(layer, ctx.model)
    dense_gpu, expert_gpu = params.dense / par.tp, params.expert / par.ep
    dp_shard = par.dp if tr.distributed_optimizer else 1
    edp_shard = max(par.dp * par.tp // par.ep, 1) if tr.distributed_optimizer else 1
    comm = tasks.dispatch_f + tasks.combine_f
    cost = LayerCost(
        type=layer.type_key if imbalance == 1.0 else f"{layer.type_key}@{layer.index}",
        role=layer.role,
        f=tasks.forward - comm,
        i=tasks.backward - (tasks.dispatch_b + tasks.combine_b),
        w=w,
        a2a_f=comm,
        a2a_b=tasks.dispatch_b + tasks.combine_b,
        act_bytes=int(saved * ctx.bpe),
        act_w_bytes=int(min(w_in, saved) * ctx.bpe),
        param_bytes=int((dense_gpu + expert_gpu) * ctx.bpe),
        grad_bytes=int((dense_gpu + expert_gpu) * 4),
        optim_bytes=int(dense_gpu * 12 / dp_shard + expert_gpu * 12 / edp_shard),
        out_bytes=int(ctx.tokens * ctx.model.hidden * ctx.bpe / par.tp),
        flops=3.0 * ctx.tokens * layer_forward_flops(layer, ctx.model, tr.seq_len),
        imbalance=imbalance,
    )
    return cost, tasks


def analytical_costs(model: ModelSpec, cluster: ClusterSpec, *,
                     imbalance: list[float] | None = None,
                     contention: float = DEFAULT_CONTENTION,
                     size_curve_sizes: tuple[int, ...] = (1, 2, 4, 8)) -> CostTable:
    """Cost table for ``model`` on ``cluster`` at its micro-batch size.

    A table is for one recomputation mode; ``recompute: auto`` (the planner's choice, made
    per table by ``planner.api``) is costed as ``none`` here.

    ``imbalance[l]`` (busiest EP rank load / mean, default 1) scales layer l's expert
    compute and all-to-all volume; layers with imbalance != 1 get their own type key.
    """
    if cluster.training.recompute == "auto":
        cluster = cluster.with_recompute("none")
    mbs = cluster.training.micro_batch_size
    table = _table(model, cluster, mbs, imbalance, contention)
    base = _serial_total(table)
    curve = tuple((s, _serial_total(_table(model, cluster, s, imbalance, contention, pairs=False)) / base)
                  for s in sorted(set(size_curve_sizes) | {mbs}))
    from dataclasses import replace

    return replace(table, size_curve=curve)


def _serial_total(t: CostTable) -> float:
    return sum(lc.f + lc.i + lc.w for lc in t.layers)


def _table(model: ModelSpec, cluster: ClusterSpec, mbs: int, imbalance: list[float] | None,
           contention: float, pairs: bool = True) -> CostTable:
    ctx = _Ctx(model, cluster, mbs * cluster.training.seq_len)
    imb = imbalance or layer_imbalance(model, None)
    layers, tasks = [], {}
    for layer in model.layers:
        cost, t = _layer_cost(ctx, layer, imb[layer.index] if layer.is_moe else 1.0)
        layers.append(cost)
        tasks[cost.type] = t
    ov = {}
    if pairs:
        for ta, fa in tasks.items():
            for tb, fb in tasks.items():
                ov[(ta, tb)] = overlapped_time(fa, fb, contention=contention)
    gpu = cluster.gpu
    cross_node = cluster.parallel.tp * cluster.parallel.dp >= cluster.gpus_per_node
    return CostTable(
        model=model.name, source="analytical", layers=tuple(layers), pairs=ov,
        p2p=P2PCost(latency_s=gpu.p2p_latency_s,
                    bandwidth=gpu.ib_bandwidth if cross_node else gpu.nvlink_bandwidth),
        microbatch_size=mbs, seq_len=cluster.training.seq_len, device=gpu.name, scale=1.0,
        meta={"contention": contention, "eff_max": EFF_MAX, "m_half": M_HALF,
              "recompute": cluster.training.recompute,
              "parallel": {"tp": cluster.parallel.tp, "ep": cluster.parallel.ep,
                           "dp": cluster.parallel.dp}},
    )
