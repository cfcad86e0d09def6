"""Cluster and training specification: GPUs, parallel degrees, batch and memory budget.

Loaded from a YAML file (``planner/data/clusters/<model>.yaml`` is each shipped model's
default; every field is described in ``planner/data/schemas/cluster.schema.json``) and
overridable from CLI options; ``check()`` validates the combination and
``check_against(model)`` the parts that depend on the model, and fills the fields the file
leaves open from the framework recipe it names (``recipe``; ``planner.core.recipes``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.core.cuda_graphs import check_scope, check_scope_against, normalize_scope
from planner.core.devices import DeviceGroup, devices_from_config, mean_peak, rank_groups
from planner.core.errors import InputError
from planner.core.hardware import GpuSpec, gpu_from_config
from planner.core.jsonio import read_yaml
from planner.core.model import ModelSpec
from planner.core.network import NetworkSpec, network_from_config
from planner.core.paths import CLUSTERS_DIR
from planner.core.recipes import RECIPE_CHOICES, apply_recipe
from planner.core.offload import NONE as NO_OFFLOAD, offload_choices, offload_layers, offload_mode, offload_modules
from planner.core.op_sac import OP, op_supported
from planner.core.recompute import MODULES, choice_of, is_module_set, module_sets_in, modules_of
from planner.core.sites import SitesSpec, sites_from_config

__all__ = ["ParallelSpec", "TrainingSpec", "ClusterSpec", "load_cluster", "default_cluster_path",
           "cluster_from_dict", "AUTO_RECOMPUTE", "RECOMPUTE_MODES", "RECOMPUTE_CHOICES", "KERNEL_CHOICES",
           "ATTENTION_CHOICES", "LOSS_CHOICES", "FP8_RECIPES", "CP_COMM_TYPES", "TORCH_RING", "PARAM_DTYPES",
           "FSDP_EXPERT_MODES"]

PRECISION_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per activation/weight element for the supported training precisions."""
AUTO_RECOMPUTE = ("none", "selective", "full")
"""The recomputation modes ``auto`` plans with (cheapest first)."""
RECOMPUTE_MODES = (*AUTO_RECOMPUTE, OP)
"""Activation recomputation modes a cost table is computed for: ``auto``'s, and torchtitan's
per-op selective checkpointing (``planner.core.op_sac``), planned when named."""
RECOMPUTE_CHOICES = ("auto", *RECOMPUTE_MODES)
"""What a cluster file or ``--recompute`` may say: a mode, or ``auto`` (the planner tries
each of ``AUTO_RECOMPUTE`` and keeps the fastest plan that fits memory; the plan records the
mode chosen)."""
KERNEL_CHOICES = ("fused", "eager")
"""``training.kernels``: fused element-wise kernels, or PyTorch eager mode."""
ATTENTION_CHOICES = ("auto", "cudnn", "flash2")
"""``training.attention_kernel``: the attention core's kernel (auto: by ``kernels``)."""
LOSS_CHOICES = ("auto", *KERNEL_CHOICES, "compiled")
"""``training.cross_entropy``: how the loss runs, fused, eager or compiled (auto: as ``kernels``)."""
FP8_RECIPES = ("te", "torchao", "torchao_rowwise")
"""``training.fp8_recipe``: whose FP8 training recipe runs the GEMMs."""
CP_COMM_TYPES = ("auto", "p2p", "torch_allgather", "torch_alltoall")
"""``training.cp_comm_type``: how context parallelism runs the attention core
(``profiler.cost_model.ring``): ``p2p`` Megatron/TE's ring (``--cp-comm-type p2p``; ``auto``
is the same), ``torch_allgather`` / ``torch_alltoall`` PyTorch's ring attention with that
rotate method (torchtitan ``experimental.context_parallel_rotate_method``)."""
TORCH_RING = ("torch_allgather", "torch_alltoall")
"""The ``cp_comm_type`` values that run PyTorch's ring attention."""
CP_NOT_MODELLED = ("a2a", "allgather", "all_gather", "a2a+p2p")
"""Megatron's other ``--cp-comm-type`` values: refused on load (not modelled)."""
PARAM_DTYPES = ("fp32", "bf16")
"""``training.param_dtype``: the dtype the optimizer's parameters and moments are kept in."""
FSDP_EXPERT_MODES = ("shard", "ep_shard")
"""``training.fsdp_experts``: how FSDP treats routed experts (``TrainingSpec.fsdp_experts``)."""


@dataclass(frozen=True, kw_only=True)
class ParallelSpec:
    """Parallel degrees. pp x tp x cp x dp = GPUs; ep x etp is carved out of dp x cp x tp
    (Megatron's expert layout: etp x ep x expert-dp = tp x cp x dp)."""

    pp: int = 1
    """Pipeline-parallel ranks."""
    vpp: int = 1
    """Virtual stages (model chunks) per pipeline rank."""
    tp: int = 1
    """Tensor-parallel degree (with sequence parallelism)."""
    ep: int = 1
    """Expert-parallel degree."""
    dp: int = 1
    """Data-parallel replicas."""
    cp: int = 1
    """Context-parallel degree: each sequence is split over cp GPUs (ring attention)."""
    etp: int = 1
    """Expert tensor-parallel degree: each routed expert's GEMMs are split over etp GPUs."""

    @property
    def num_stages(self) -> int:
        """Pipeline stages in all: pp x vpp."""
        return self.pp * self.vpp


@dataclass(frozen=True, kw_only=True)
class TrainingSpec:
    """What one optimizer step processes and the memory budget."""

    global_batch: int
    """Sequences per optimizer step, all replicas together."""
    seq_len: int
    """Tokens per sequence."""
    micro_batch_size: int = 1
    """Sequences per microbatch."""
    precision: str = "bf16"
    """Weights and activations precision: bf16, fp16 or fp8."""
    memory_headroom: float = 0.1
    """Share of GPU memory kept free (allocator fragmentation, NCCL buffers, CUDA context)."""
    distributed_optimizer: bool = True
    """Optimizer state sharded over data-parallel ranks (Megatron --use-distributed-optimizer)."""
    fsdp: bool = False
    """Parameters and gradients sharded too (torch FSDP2 / Megatron-FSDP): gathered per layer
    in forward and backward, gradients reduce-scattered per layer."""
    param_dtype: str = "fp32"
    """What the optimizer updates: ``fp32`` (BF16 weights for compute, FP32 master weights, FP32
    gradients and FP32 Adam moments: Megatron's mixed precision, 18 bytes per parameter) or
    ``bf16`` (the parameters themselves are BF16 and ``torch.optim.Adam`` keeps its moments in
    the parameter's dtype, ``torch.zeros_like(p)`` in torch/optim/adam.py ``_init_group``: 2 + 2
    + 4 bytes; NeMo AutoModel builds its MoE models so, ``initialize_weights(dtype=torch.bfloat16)``
    in nemo_automodel/components/models/deepseek_v3/model.py)."""
    grad_reduce_in_fp32: bool = True
    """Megatron's ``ddp.grad_reduce_in_fp32`` (default on for BF16 mixed precision; off with
    ``--grad-reduce-in-bf16``, megatron/training/arguments.py): the gradient buffer and its
    data-parallel reduce-scatter in FP32 (4 bytes per parameter) or BF16 (2). Megatron-Bridge's
    performance recipes turn it off (``set_qwen3_common_configs``, scripts/performance/configs/
    qwen3/qwen3_llm_pretrain.py)."""
    fsdp_experts: str = "shard"
    """With ``fsdp``, how FSDP treats the routed experts: ``shard`` (sharded over the
    expert-data-parallel group like every other parameter) or ``ep_shard`` (NeMo AutoModel's MoE
    parallelizer, nemo_automodel/components/moe/parallelizer.py ``apply_fsdp``: experts get their
    own ``fully_shard`` over the ``ep_shard`` mesh, dp x cp / ep ranks, only when that mesh has
    more than one rank; otherwise they are FSDP's ``ignored_params``, kept whole on their EP rank,
    never gathered, so a pipeline holds no second copy of them)."""
    kernels: str = "fused"
    """How element-wise work runs: fused (Megatron / Transformer Engine kernels, or torch.compile)
    or eager (PyTorch eager mode, one kernel per operation; ``profiler.cost_model.context``)."""
    attention_kernel: str = "auto"
    """The attention core's kernel: ``cudnn`` (Transformer Engine's cuDNN fused attention,
    Megatron), ``flash2`` (FlashAttention-2: PyTorch's ``scaled_dot_product_attention`` picks
    it first on CUDA, with or without torch.compile: ``sdp_priority_order`` in
    aten/src/ATen/Context.h puts cuDNN last), or ``auto``: cudnn with fused kernels, flash2
    in eager mode."""
    fp8_recipe: str = "te"
    """With ``precision: fp8``: ``te`` (Transformer Engine, Megatron: the cast fused into the
    producing kernel, FP8 copies of matmul inputs kept for the backward) or ``torchao``
    (torchao ``Float8Linear``, torchtitan: dynamic scaling, an amax pass and a cast per
    operand, the BF16 inputs kept and cast again in the backward; tensorwise scaling, torchao's
    default) or ``torchao_rowwise`` (the same with torchao's ``rowwise`` recipe: per-row scales,
    the row-scaled ``_scaled_mm``; ``profiler.cost_model.gemm.ROWWISE_SAVING_SHARE``)."""
    cross_entropy: str = "auto"
    """How the loss runs over the logits: ``fused`` (Megatron's vocab-parallel cross entropy
    keeps an FP32 softmax and writes its gradient in place), ``eager`` (PyTorch
    ``F.cross_entropy(logits.float(), ...)`` as torchtitan calls it: FP32 log-softmax kept,
    two more FP32 logit-sized buffers in its backward), ``compiled`` (the same loss under
    ``torch.compile``, as torchtitan runs it with ``training.compile`` from April 2025: the
    upcast fused into the loss, BF16 logits kept, a BF16 gradient), or ``auto``: by ``kernels``."""
    cp_comm_type: str = "auto"
    """How context parallelism runs attention (``CP_COMM_TYPES``; ``profiler.cost_model.ring``)."""
    cuda_graphs: bool = False
    """MoE router and token preprocessing captured in CUDA graphs (Megatron
    ``--cuda-graph-scope moe_router moe_preprocess``): their host-side launches and the
    host-device synchronisation of token counts leave the step (``FittedConstants.moe_layer_overhead_s``
    is not charged)."""
    cuda_graph_scope: str = "auto"
    """Megatron's ``--cuda-graph-scope`` (a list of ``CudaGraphScope`` names, ``full``: whole
    layers, ``none``), or ``auto``: what ``cuda_graphs`` says (true: ``moe_router
    moe_preprocess``). Which host time each scope removes: ``planner.core.cuda_graphs``."""
    moe_expert_capacity_factor: float | None = None
    """Megatron's ``--moe-expert-capacity-factor``: each expert takes at most this many times
    its mean share of a rank's token copies, the rest are dropped (None: dropless). The
    busiest rank's expert work and all-to-all volume are then at most this factor times the
    mean, whatever the routing (``profiler.analytical``)."""
    moe_pad_expert_input_to_capacity: bool = False
    """Megatron's ``--moe-pad-expert-input-to-capacity``: every expert's buffer is filled to
    capacity, so each rank computes and sends exactly the capacity (and the token counts
    need no host synchronisation)."""
    recompute: str = "auto"
    """Activation recomputation: none, selective (attention core and element-wise work, Megatron's
    selective with ``core_attn moe_act layernorm``), full (keep only each layer's input; the
    forward runs again before backward), op (torchtitan's per-op selective checkpointing:
    every second matmul's output and the attention's kept, ``planner.core.op_sac``), auto (the planner chooses; ``recompute_modes``), a
    list of Megatron's recompute modules (``[moe_act, layernorm]``; ``planner.core.recompute``), or
    a list of such lists (the planner plans with each and keeps the fastest that fits)."""

    def recompute_modes(self) -> tuple[str, ...]:
        """The modes to plan with: the one given, ``AUTO_RECOMPUTE`` for auto, or each module
        set of a choice."""
        if is_module_set(self.recompute):
            return module_sets_in(self.recompute)
        return AUTO_RECOMPUTE if self.recompute == "auto" else (self.recompute,)

    offload: str = NO_OFFLOAD
    """Activation offloading (``planner.core.offload``): none, a number of layers (Megatron's
    ``--cpu-offloading-num-layers``) or a list of Megatron's ``--offload-modules``; costed by
    ``profiler.cost_model.offload``. A list of such (``[none, [expert_fc1, moe_act]]``) is a
    choice: the planner plans with each and keeps the fastest plan that fits."""

    @property
    def bytes_per_element(self) -> int:
        """Bytes per activation element."""
        return PRECISION_BYTES[self.precision]


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """GPUs, their layout and how the job uses them."""

    gpu: GpuSpec
    """Accelerator kind."""
    num_gpus: int
    """GPUs in the job."""
    parallel: ParallelSpec
    """Parallel degrees."""
    training: TrainingSpec
    """Batch, sequence length, precision, memory headroom."""
    gpus_per_node: int = 8
    """GPUs sharing NVLink (72 for a GB200 NVL72 rack)."""
    network: NetworkSpec = NetworkSpec()
    """Dispatcher and link bandwidth overrides (``planner.core.network``)."""
    sites: SitesSpec = SitesSpec()
    """Sites the GPUs are split over and their slow link (``planner.core.sites``)."""
    recipe: str = "none"
    """Framework recipe whose values fill the training and network fields this cluster leaves
    open (``planner.core.recipes``): megatron (Megatron-Bridge), torchtitan, or none."""
    stated: frozenset[str] = frozenset()
    """Dotted paths of the training and network fields the cluster file states (e.g.
    ``training.fsdp``; a recipe never overrides them), and ``recipe`` when it names one."""
    devices: tuple[DeviceGroup, ...] = ()
    """A mixed fleet's device groups, in pipeline-rank order (``planner.core.devices``); empty:
    every GPU is ``gpu``. With groups, ``gpu`` is the first group's and ``num_gpus`` their sum."""

    @property
    def rank_devices(self) -> tuple[DeviceGroup, ...]:
        """The device group of each pipeline rank ([Note: device mapping] in
        ``planner.core.devices``); empty without groups."""
        if not self.devices:
            return ()
        p = self.parallel
        return tuple(self.devices[k] for k in rank_groups(self.devices, p.tp * p.cp * p.dp))

    def for_group(self, group: DeviceGroup) -> "ClusterSpec":
        """This cluster as one group sees it: its GPU and node size (costs per GPU are computed
        for it; the degrees stay the job's)."""
        return replace(self, gpu=group.gpu, gpus_per_node=group.gpus_per_node, devices=())

    def with_devices(self, groups: tuple[DeviceGroup, ...], *, keep_pp: bool = False) -> "ClusterSpec":
        """This cluster on the fleet ``groups``: ``num_gpus`` their sum; pp follows with the rank
        width (tp x cp x dp) kept, or with ``keep_pp`` dp follows (``with_parallel``)."""
        total, p = sum(g.count for g in groups), self.parallel
        spec = replace(self, gpu=groups[0].gpu, gpus_per_node=groups[0].gpus_per_node, num_gpus=total,
                       devices=groups)
        width = p.tp * p.cp * p.dp
        if keep_pp or total % width:
            return spec.with_parallel(pp=p.pp)
        return replace(spec, parallel=replace(p, pp=total // width))

    @property
    def nvlink_bandwidth(self) -> float:
        """NVLink bytes/s per GPU, one direction (the network section's, else the preset's)."""
        return self.network.nvlink_gbps * 1e9 or self.gpu.nvlink_bandwidth

    @property
    def network_bandwidth(self) -> float:
        """NIC bytes/s per GPU across nodes, one direction (the network section's, else the preset's)."""
        return self.network.network_gbps * 1e9 or self.gpu.ib_bandwidth

    @property
    def memory_limit_bytes(self) -> int:
        """Per-GPU memory a plan may use: capacity x (1 - headroom)."""
        return int(self.gpu.memory_bytes * (1.0 - self.training.memory_headroom))

    @property
    def mean_peak_flops(self) -> float:
        """Dense BF16 peak per GPU, averaged over the fleet's GPUs (the MFU denominator)."""
        if not self.devices:
            return self.gpu.peak_flops
        return mean_peak([(g.count, g.gpu.peak_flops) for g in self.devices])

    @property
    def rank_memory_limits(self) -> tuple[int, ...]:
        """``memory_limit_bytes`` of each pipeline rank's group; empty without groups."""
        keep = 1.0 - self.training.memory_headroom
        return tuple(int(g.gpu.memory_bytes * keep) for g in self.rank_devices)

    @property
    def microbatches_per_step(self) -> int:
        """Default microbatch count: per-replica batch / micro-batch size."""
        t = self.training
        return t.global_batch // (self.parallel.dp * t.micro_batch_size)

    def check(self) -> "ClusterSpec":
        """Validate degrees and batch divisibility; return self."""
        p, t = self.parallel, self.training
        for name in ("pp", "vpp", "tp", "ep", "dp", "cp", "etp"):
            if getattr(p, name) < 1:
                raise InputError(f"parallel.{name}", f"must be >= 1, got {getattr(p, name)}")
        if p.pp * p.tp * p.cp * p.dp != self.num_gpus:
            fits = self.num_gpus % (p.pp * p.tp * p.cp) == 0
            names, vals = ("pp x tp x cp x dp", f"{p.pp}x{p.tp}x{p.cp}x{p.dp}") if p.cp > 1 else \
                ("pp x tp x dp", f"{p.pp}x{p.tp}x{p.dp}")
            raise InputError("parallel", f"{names} = {vals} = {p.pp * p.tp * p.cp * p.dp}"
                             f" but num_gpus = {self.num_gpus}",
                             f"set dp to {self.num_gpus // (p.pp * p.tp * p.cp)} or change num_gpus" if fits else
                             f"pick pp x tp{' x cp' if p.cp > 1 else ''} dividing {self.num_gpus} or change num_gpus")
        if (p.dp * p.cp * p.tp) % (p.ep * p.etp):
            if p.cp == p.etp == 1:
                raise InputError("parallel.ep", f"ep {p.ep} must divide dp x tp = {p.dp * p.tp}",
                                 "pick an ep that divides dp x tp")
            raise InputError("parallel.ep", f"ep x etp = {p.ep}x{p.etp} must divide dp x cp x tp = "
                             f"{p.dp * p.cp * p.tp}", "pick ep and etp whose product divides dp x cp x tp")
        if t.seq_len % p.cp:
            raise InputError("parallel.cp", f"cp {p.cp} does not divide seq_len {t.seq_len}",
                             "pick a cp dividing the sequence length")
        if t.precision not in PRECISION_BYTES:
            raise InputError("training.precision", f"unknown {t.precision!r}",
                             f"use one of {', '.join(PRECISION_BYTES)}")
        if t.global_batch < 1 or t.seq_len < 1 or t.micro_batch_size < 1:
            raise InputError("training", "global_batch, seq_len and micro_batch_size must be >= 1")
        if t.global_batch % (p.dp * t.micro_batch_size):
            raise InputError("training.global_batch",
                             f"{t.global_batch} is not divisible by dp x micro_batch_size"
                             f" = {p.dp * t.micro_batch_size}",
                             "make global_batch a multiple of dp x micro_batch_size")
        c = t.moe_expert_capacity_factor
        if c is not None and not (math.isfinite(c) and c > 0):
            raise InputError("training.moe_expert_capacity_factor", f"must be a positive finite number, got {c}",
                             "e.g. 1.25, or leave it out for dropless routing")
        if t.moe_pad_expert_input_to_capacity and c is None:
            raise InputError("training.moe_pad_expert_input_to_capacity", "needs a capacity",
                             "set training.moe_expert_capacity_factor too, as Megatron requires")
        if t.kernels not in KERNEL_CHOICES:
            raise InputError("training.kernels", f"unknown {t.kernels!r}", f"use one of {', '.join(KERNEL_CHOICES)}")
        if t.attention_kernel not in ATTENTION_CHOICES:
            raise InputError("training.attention_kernel", f"unknown {t.attention_kernel!r}",
                             f"use one of {', '.join(ATTENTION_CHOICES)}")
        if t.fp8_recipe not in FP8_RECIPES:
            raise InputError("training.fp8_recipe", f"unknown {t.fp8_recipe!r}", f"use one of {', '.join(FP8_RECIPES)}")
        check_scope(t, self.stated)
        if t.cp_comm_type in CP_NOT_MODELLED:
            raise InputError("training.cp_comm_type", f"Megatron's {t.cp_comm_type!r} is not modelled",
                             f"use one of {', '.join(CP_COMM_TYPES)}")
        if t.cp_comm_type not in CP_COMM_TYPES:
            raise InputError("training.cp_comm_type", f"unknown {t.cp_comm_type!r}",
                             f"use one of {', '.join(CP_COMM_TYPES)}")
        if t.param_dtype not in PARAM_DTYPES:
            raise InputError("training.param_dtype", f"unknown {t.param_dtype!r}",
                             f"use one of {', '.join(PARAM_DTYPES)}")
        if t.fsdp_experts not in FSDP_EXPERT_MODES:
            raise InputError("training.fsdp_experts", f"unknown {t.fsdp_experts!r}",
                             f"use one of {', '.join(FSDP_EXPERT_MODES)}")
        if t.fsdp_experts != "shard" and not t.fsdp:
            raise InputError("training.fsdp_experts", f"{t.fsdp_experts!r} needs FSDP",
                             "set training.fsdp: true, or leave fsdp_experts out")
        if t.cross_entropy not in LOSS_CHOICES:
            raise InputError("training.cross_entropy", f"unknown {t.cross_entropy!r}",
                             f"use one of {', '.join(LOSS_CHOICES)}")
        if is_module_set(t.recompute):
            choice_of([modules_of(m) for m in module_sets_in(t.recompute)], field="training.recompute")
        elif t.recompute not in RECOMPUTE_CHOICES:
            raise InputError("training.recompute", f"unknown {t.recompute!r}",
                             f"use one of {', '.join(RECOMPUTE_CHOICES)}, or a list of Megatron's "
                             f"recompute modules ({', '.join(MODULES)})")
        offload_mode(t.offload, field="training.offload")
        if any(offload_layers(m) for m in offload_choices(t.offload)):
            _check_layer_offload(t, p)
        if not 0.0 <= t.memory_headroom < 1.0:
            raise InputError("training.memory_headroom", f"{t.memory_headroom} is not in [0, 1)")
        if self.recipe not in RECIPE_CHOICES:
            raise InputError("recipe", f"unknown {self.recipe!r}", f"use one of {', '.join(RECIPE_CHOICES)}")
        if self.devices:
            if sum(g.count for g in self.devices) != self.num_gpus:
                raise InputError("devices", f"the groups hold {sum(g.count for g in self.devices)} GPUs but "
                                 f"num_gpus = {self.num_gpus}", "leave num_gpus out or make it the groups' sum")
            rank_groups(self.devices, p.tp * p.cp * p.dp)  # each group a whole number of ranks
        return self

    def check_against(self, model: ModelSpec) -> "ClusterSpec":
        """Validate the parts that depend on the model; return the cluster to plan with: this
        one with the open fields filled from ``recipe``'s values for ``model``."""
        p = self.parallel
        if model.num_layers < p.num_stages:
            raise InputError("parallel.pp", f"{model.num_layers} layers (embedding and head included)"
                             f" cannot fill pp x vpp = {p.num_stages} stages",
                             "lower pp or vpp")
        if model.moe is not None and model.moe.num_experts % p.ep:
            raise InputError("parallel.ep", f"ep {p.ep} does not divide {model.moe.num_experts} experts",
                             "pick an ep that divides the expert count")
        for mode in module_sets_in(self.training.recompute):
            _check_modules(modules_of(mode), model)
        if self.training.recompute == OP:
            _check_op(model)
        for mode in offload_choices(self.training.offload):
            _check_offload(mode, model)
        decoders = [layer for layer in model.layers if layer.role == "decoder"]
        check_scope_against(self.training, moe=any(layer.is_moe for layer in decoders),
                            all_moe=bool(decoders) and all(layer.is_moe for layer in decoders))
        return apply_recipe(self, model.name, self.recipe)

    def for_target(self, target: str) -> "ClusterSpec":
        """The cluster ``--target target`` plans: the target's recipe fills the open fields
        (``check_against``) unless the file names its own ``recipe``."""
        if target not in RECIPE_CHOICES or "recipe" in self.stated:
            return self
        # The target's recipe fills the environment (dispatcher, kernels, CUDA graphs, FSDP);
        # recomputation stays the planner's choice (auto: the fastest mode that fits, which the
        # export then passes to the framework) unless the file names a recipe or a mode itself.
        return replace(self, recipe=target, stated=self.stated | {"training.recompute"})

    def with_recompute(self, mode: str) -> "ClusterSpec":
        """The same cluster with recomputation ``mode``."""
        return replace(self, training=replace(self.training, recompute=mode))

    def with_parallel(self, **changes: int) -> "ClusterSpec":
        """Copy with some parallel degrees changed; dp follows from num_gpus when pp or tp change."""
        par = replace(self.parallel, **changes)
        if "dp" not in changes and ("pp" in changes or "tp" in changes or "cp" in changes):
            dp = self.num_gpus // (par.pp * par.tp * par.cp) if par.pp * par.tp * par.cp else 0
            if dp * par.pp * par.tp * par.cp == self.num_gpus and dp >= 1:
                room = dp * par.tp * par.cp // par.etp if (dp * par.tp * par.cp) % par.etp == 0 else 1
                ep = par.ep if room % par.ep == 0 else _largest_divisor(room, par.ep)
                par = replace(par, dp=dp, ep=ep)
        return replace(self, parallel=par)


def _check_modules(names: tuple[str, ...], model: ModelSpec) -> None:
    """A recompute module no layer of ``model`` has is refused: Megatron-Core raises for
    ``mla_up_proj`` without MLA and for ``moe_act`` without MoE's grouped GEMM
    (transformer_config.py ``__post_init__``), and the others would recompute nothing."""
    ffns = {layer.ffn for layer in model.layers if layer.role == "decoder"}
    has = {"core_attn": any(layer.mixer in ("gqa", "mla") for layer in model.layers if layer.role == "decoder"),
           "layernorm": True, "mla_up_proj": model.mla is not None, "mlp": "dense" in ffns,
           "moe_act": model.moe is not None, "moe": model.moe is not None,
           "shared_experts": model.moe is not None and bool(model.moe.shared_intermediate)}
    missing = [n for n in names if not has[n]]
    if missing:
        raise InputError("training.recompute", f"{model.name} has no {missing[0]} module to recompute",
                         f"drop {missing[0]} from the module list")


def _check_op(model: ModelSpec) -> None:
    """``recompute: op`` is refused for a layer kind whose matmul order ppplan does not
    describe (``planner.core.op_sac``): its kept bytes would be a guess."""
    for layer in model.layers:
        if layer.role == "decoder" and not op_supported(layer.mixer, layer.ffn, gated=model.linear is not None):
            kind = f"{layer.mixer}{' (gated)' if model.linear is not None and layer.mixer == 'gqa' else ''} + {layer.ffn}"
            raise InputError("training.recompute", f"op (torchtitan's per-op checkpointing) is described for GQA "
                             f"attention with a dense MLP; {model.name} has {kind} layers",
                             "use selective or full recomputation")


def _check_layer_offload(t: "TrainingSpec", p: ParallelSpec) -> None:
    """Megatron-Core refuses ``--cpu-offloading`` with pipeline parallelism, with activation
    recomputation and with CUDA graphs (megatron/core/transformer/transformer_config.py
    ``__post_init__``: "no support for Pipeline parallelism with CPU offloading", "CPU offloading
    does not work when activation recomputation is enabled", "CUDA graphs not supported with
    CPU offloading")."""
    if p.pp > 1:
        raise InputError("training.offload", f"Megatron's --cpu-offloading does not run with pp {p.pp}",
                         "use pp 1, or a list of --offload-modules (fine-grained offloading)")
    if t.recompute != "none":
        raise InputError("training.offload", f"Megatron's --cpu-offloading does not run with recompute {t.recompute!r}",
                         'pass --recompute none, or set training.recompute: "none"')
    if t.cuda_graphs:
        raise InputError("training.offload", "Megatron's --cpu-offloading does not run with CUDA graphs",
                         "set training.cuda_graphs: false")


def _check_offload(mode: str, model: ModelSpec) -> None:
    """Layer-level offloading takes fewer layers than the model has (transformer_config.py:
    "CPU offloading can be done only for layers less than num_layers"); the expert modules
    need MoE layers."""
    n, decoders = offload_layers(mode), sum(1 for layer in model.layers if layer.role == "decoder")
    if n and n >= decoders:
        raise InputError("training.offload", f"{n} layers offloaded, {model.name} has {decoders}",
                         f"offload fewer than {decoders} layers")
    moe = [m for m in offload_modules(mode) if m in ("expert_fc1", "moe_act")]
    if moe and model.moe is None:
        raise InputError("training.offload", f"{model.name} has no {moe[0]} module to offload",
                         f"drop {moe[0]} from the module list")


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


def default_cluster_path(model_name: str) -> Path | None:
    """The shipped default cluster of a model id, if there is one."""
    p = CLUSTERS_DIR / f"{model_name}.yaml"
    return p if p.exists() else None


def _section(data: dict[str, Any], key: str, cls: type, where: str) -> Any:
    raw = data.get(key, {})
    if not isinstance(raw, dict):
        raise InputError(f"{where}.{key}", "expected a mapping")
    known = {f.name: f for f in dataclasses.fields(cls)}
    for name, value in raw.items():
        if name not in known:
            raise InputError(f"{where}.{key}.{name}", "unknown field",
                             f"known fields: {', '.join(known)}")
        want = known[name].type
        ok = (isinstance(value, bool) if want == "bool" else
              isinstance(value, str) if want == "str" else
              isinstance(value, (int, float)) and not isinstance(value, bool)
              and (want != "int" or isinstance(value, int)))
        if not ok:
            raise InputError(f"{where}.{key}.{name}", f"expected {want}, got {value!r}", _yaml_hint(want, value))
    for name, f in known.items():
        if name not in raw and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise InputError(f"{where}.{key}.{name}", "missing", f"add '{name}' under '{key}'")
    return cls(**raw)


def cluster_from_dict(data: Any, *, where: str = "cluster") -> ClusterSpec:
    """Build and check a ``ClusterSpec`` from a parsed YAML/JSON mapping."""
    if not isinstance(data, dict):
        raise InputError(where, "expected a mapping with gpu, num_gpus, parallel, training")
    known = {"gpu", "num_gpus", "gpus_per_node", "parallel", "training", "network", "sites", "recipe", "description",
             "devices"}
    for key in data:
        if key not in known:
            raise InputError(f"{where}.{key}", "unknown field", f"known fields: {', '.join(sorted(known))}")
    devices = devices_from_config(data["devices"], where=f"{where}.devices") if "devices" in data else ()
    if devices and "gpu" in data:
        raise InputError(f"{where}.gpu", "given together with devices", "leave gpu out: each group names its type")
    if devices and "sites" in data:
        raise InputError(f"{where}.sites", "given together with devices (a mixed fleet over several sites is not "
                         "modelled)", "plan the fleet on one site, or the sites with one GPU type")
    if devices:
        data = {"gpu": devices[0].gpu.name, "num_gpus": sum(g.count for g in devices),
                "gpus_per_node": devices[0].gpus_per_node, **data}
    if "gpu" not in data or "num_gpus" not in data:
        raise InputError(f"{where}.{'gpu' if 'gpu' not in data else 'num_gpus'}", "missing")
    num = data["num_gpus"]
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise InputError(f"{where}.num_gpus", f"expected a positive integer, got {num!r}")
    per_node = data.get("gpus_per_node", 8)
    if isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < 1:
        raise InputError(f"{where}.gpus_per_node", f"expected a positive integer, got {per_node!r}")
    if "training" not in data:
        raise InputError(f"{where}.training", "missing", "add global_batch and seq_len")
    recipe = data.get("recipe", "none")
    if recipe not in RECIPE_CHOICES:
        raise InputError(f"{where}.recipe", f"unknown {recipe!r}",
                         f"use one of {', '.join(RECIPE_CHOICES)} (the framework whose recipe fills "
                         "the fields this file leaves out)")
    data = _modules_as_mode(data, where)
    data = _offload_as_mode(data, where)
    data = _scope_as_string(data, where)
    return ClusterSpec(
        gpu=devices[0].gpu if devices else gpu_from_config(data["gpu"], where=f"{where}.gpu"),
        devices=devices,
        num_gpus=num,
        gpus_per_node=per_node,
        network=network_from_config(data.get("network"), where=f"{where}.network"),
        sites=sites_from_config(data.get("sites"), where=f"{where}.sites"),
        parallel=_section(data, "parallel", ParallelSpec, where),
        training=_section(data, "training", TrainingSpec, where),
        recipe=recipe,
        stated=_stated(data),
    ).check()


def _scope_as_string(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``training.cuda_graph_scope`` given as a list (or a string of names), as its stored string."""
    training = data.get("training")
    if not isinstance(training, dict) or "cuda_graph_scope" not in training:
        return data
    scope = normalize_scope(training["cuda_graph_scope"], field=f"{where}.training.cuda_graph_scope")
    return {**data, "training": {**training, "cuda_graph_scope": scope}}


def _modules_as_mode(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``training.recompute`` given as a list of Megatron module names (or a list of such lists:
    a choice), as its mode string."""
    training = data.get("training")
    if not isinstance(training, dict) or not isinstance(training.get("recompute"), list):
        return data
    given = training["recompute"]
    sets = given if given and all(isinstance(g, list) for g in given) else [given]
    mode = choice_of(sets, field=f"{where}.training.recompute")
    return {**data, "training": {**training, "recompute": mode}}


def _offload_as_mode(data: dict[str, Any], where: str) -> dict[str, Any]:
    """``training.offload`` given as a number of layers or a list of modules, as its mode string."""
    training = data.get("training")
    if not isinstance(training, dict) or "offload" not in training:
        return data
    mode = offload_mode(training["offload"], field=f"{where}.training.offload")
    return {**data, "training": {**training, "offload": mode}}


def _stated(data: dict[str, Any]) -> frozenset[str]:
    """Dotted paths of the training and network fields a cluster mapping states, and
    ``recipe`` when it names one."""
    fields = {f"{key}.{name}" for key in ("training", "network")
              if isinstance(data.get(key), dict) for name in data[key]}
    return frozenset(fields | ({"recipe"} if "recipe" in data else set()))


def _yaml_hint(want: str, value: Any) -> str:
    """YAML 1.1 reads unquoted no/yes/off/on as booleans: ``recompute: no`` is False."""
    if want == "str" and isinstance(value, bool):
        return 'quote the word, e.g. recompute: "none" (YAML reads unquoted no, yes, on and off as true/false)'
    return ""


def load_cluster(path: str | Path) -> ClusterSpec:
    """Load a cluster YAML file."""
    data = read_yaml(path, what="cluster file")
    if isinstance(data, dict) and isinstance(data.get("num_gpus"), int) and \
            isinstance(data.get("gpus_per_node"), int) and data["gpus_per_node"] > data["num_gpus"] >= 1:
        raise InputError("cluster.gpus_per_node", f"{data['gpus_per_node']} is more than num_gpus "
                         f"{data['num_gpus']}", f"give the GPUs of the job that share one NVLink domain "
                         f"(at most {data['num_gpus']})")
    return cluster_from_dict(data, where="cluster")
