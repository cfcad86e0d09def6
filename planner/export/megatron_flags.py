"""The Megatron-LM flags a plan needs besides its layout: parallel sizes, batch, precision,
recomputation and the companion flags Megatron's own checks demand.
The rules and their sources are at ``companion_flags``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.core.cuda_graphs import graph_impl, scopes_of
from planner.core.plan import Plan
from planner.core.offload import offload_layers, offload_modules
from planner.core.op_sac import OP
from planner.core.recompute import is_module_set, modules_of
from planner.export.schedule import ExportError

__all__ = ["Companions", "companion_flags", "cuda_graph_settings", "recompute_args", "recompute_settings",
           "offload_settings", "render", "is_moe", "RECOMPUTE_MODULES"]

RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm")
"""Selective recomputation modules (what ``profiler.analytical`` costs for selective:
attention core, MoE activation, norms)."""


@dataclass(frozen=True, kw_only=True)
class Companions:
    """Flags besides the layout and schedule switches, and environment variables."""

    settings: dict[str, Any]
    """The flags as values: argument destination (``--a-b`` is ``a_b``) -> value (``render``)."""
    args: list[str]
    """Command-line flags."""
    env: dict[str, str]
    """Environment variables the launcher must set."""


def is_moe(plan: Plan) -> bool:
    """Whether any layer of the plan's model is MoE (``model.layer_types``)."""
    return any("moe" in str(t) for t in plan.model.layer_types or ())


def render(settings: dict[str, Any]) -> list[str]:
    """Megatron-LM flags of ``settings``: True a switch, None or False left out (Megatron's
    default), a list its values, a float in its shortest form."""
    args: list[str] = []
    for dest, value in settings.items():
        if value is None or value is False:
            continue
        args.append("--" + dest.replace("_", "-"))
        if isinstance(value, list):
            args += [str(v) for v in value]
        elif isinstance(value, float):
            args.append(f"{value:g}")
        elif value is not True:
            args.append(str(value))
    return args


def recompute_settings(plan: Plan) -> dict[str, Any]:
    """All four recomputation fields for the plan's mode (None where the mode sets none); a
    module set is ``--recompute-granularity selective --recompute-modules`` with its modules."""
    mode = plan.cluster.settings.recompute or "none"
    if mode == OP:
        raise ExportError("megatron", "the plan recomputes with torchtitan's per-op policy (recompute op), "
                          "which Megatron-Core has no flag for", "plan with --recompute selective, full or none")
    out: dict[str, Any] = {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None,
                           "recompute_modules": None}
    if mode == "selective":
        out.update(recompute_granularity="selective",
                   recompute_modules=[m for m in RECOMPUTE_MODULES if m != "moe_act" or is_moe(plan)])
    elif mode == "full":
        out.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    elif is_module_set(mode):  # Megatron's own names (planner.core.recompute)
        out.update(recompute_granularity="selective", recompute_modules=list(modules_of(mode)))
    return out


def offload_settings(plan: Plan) -> dict[str, Any]:
    """Megatron-Core's activation-offloading fields for the plan's ``training.offload``
    (``planner.core.offload``; model_parallel_config.py ``cpu_offloading``,
    ``cpu_offloading_num_layers``; transformer_config.py ``fine_grained_activation_offloading``,
    ``offload_modules``; Megatron-LM ``--cpu-offloading --cpu-offloading-num-layers N`` and
    ``--fine-grained-activation-offloading --offload-modules ...``): all four when the plan
    offloads, none when it does not (so plans without offloading export as before)."""
    mode = plan.cluster.settings.get("offload", "none") or "none"
    if mode == "none":
        return {}
    layers, modules = offload_layers(mode), list(offload_modules(mode))
    return {"cpu_offloading": layers > 0, "cpu_offloading_num_layers": layers or None,
            "fine_grained_activation_offloading": bool(modules), "offload_modules": modules or None}


def recompute_args(plan: Plan) -> list[str]:
    """Megatron options for the plan's recomputation mode (none for none)."""
    return render(recompute_settings(plan))


def cuda_graph_settings(plan: Plan) -> dict[str, Any]:
    """``--cuda-graph-impl`` and ``--cuda-graph-scope`` for the plan's CUDA-graph scopes
    (``planner.core.cuda_graphs``; both None without graphs). Whole-layer graphs (``full``)
    pass no scope: Megatron's empty scope list is the whole layer (megatron-core 0.16.1
    ``TransformerConfig.cuda_graph_scope``). Megatron refuses full recomputation with any
    graph but the whole iteration, so a full-recompute plan exports none (``scopes_of``,
    which costed it so); graphed
    recomputed modules need dropout off (``--attention-dropout 0`` / ``--hidden-dropout 0``)."""
    train = plan.cluster.settings
    scopes = scopes_of(str(train.get("cuda_graph_scope", "auto")), bool(train.get("cuda_graphs", False)),
                       train.recompute)
    if not scopes:
        return {"cuda_graph_impl": None, "cuda_graph_scope": None}
    modules = recompute_settings(plan)["recompute_modules"] or []
    out: dict[str, Any] = {"cuda_graph_impl": graph_impl(scopes, recompute_moe="moe" in modules),
                           "cuda_graph_scope": None if scopes == ("full",) else list(scopes)}
    # Graphed recomputation takes no random numbers (transformer_config.py "attention dropout is not
    # supported with graphed attention recomputation", "hidden dropout is not supported with graphed
    # MLP/MoE recomputation"): the plan's costs assume no dropout, so the export turns it off there
    whole = bool({"full", "full_iteration"} & set(scopes))
    if "core_attn" in modules and (whole or "attn" in scopes):
        out["attention_dropout"] = 0.0
    if ({"mlp", "moe"} & set(modules)) and (whole or {"mlp", "moe"} & set(scopes)):
        out["hidden_dropout"] = 0.0
    return out


def companion_flags(plan: Plan, *, overlap: bool) -> Companions:
    """Parallel sizes, batch, precision and recomputation flags with their companions.

    ``overlap``: the plan runs Megatron's EP overlap (``--overlap-moe-expert-parallel-comm``).

    Rules, each from Megatron's source (Megatron-LM main, ``megatron/training/arguments.py``
    ``validate_args``; megatron-core 0.16 ``megatron/core/transformer/transformer_config.py``
    ``TransformerConfig.__post_init__``):

    - ``moe_act`` in ``--recompute-modules`` needs ``--moe-grouped-gemm``
      (transformer_config.py, "moe_act in recompute_modules is only supported with
      moe_grouped_gemm"); a dense model has no MoE module, so its selective set has no
      ``moe_act``; MoE plans always get ``--moe-grouped-gemm`` (the cost model's grouped
      expert GEMMs).
    - ``--overlap-moe-expert-parallel-comm`` needs ``--moe-token-dispatcher-type alltoall``
      (or flex), ``--bf16`` (or fp16), expert parallelism, no full recomputation and no
      recompute method, at most one MTP layer (transformer_config.py, the
      ``overlap_moe_expert_parallel_comm`` block); ``--delay-wgrad-compute`` needs it.
    - ``--recompute-granularity selective`` takes no ``--recompute-method``
      (arguments.py: "recompute method is not yet supported for selective").
    - tp > 1: ``--sequence-parallel`` (what the cost model assumes; arguments.py turns it
      off when tp == 1) and, for MoE, ``--expert-tensor-parallel-size`` of the plan (1 by
      default; Megatron's default is ETP = TP, arguments.py "if
      args.expert_tensor_parallel_size is None"); ``CUDA_DEVICE_MAX_CONNECTIONS=1`` unless the
      EP overlap runs (arguments.py asserts it on Hopper and older).
    - ``--seq-length`` with ``--max-position-embeddings`` at least as large (arguments.py
      "max_position_embeddings ... must be greater than or equal to seq_length").
    - ``--cuda-graph-impl`` / ``--cuda-graph-scope`` as the cluster's CUDA-graph scope
      (``cuda_graph_settings``).
    - ``--use-distributed-optimizer`` when the plan's memory assumed a sharded optimizer
      (cluster ``training.distributed_optimizer``).
    - ``--grad-reduce-in-bf16`` when the plan's memory assumed BF16 gradients (cluster
      ``training.grad_reduce_in_fp32: false``): validate_args then sets
      ``accumulate_allreduce_grads_in_fp32 = False``, which training.py passes on as the DDP
      config's ``grad_reduce_in_fp32`` (megatron-core ``distributed_data_parallel.py``:
      ``grad_dtype = torch.float if ddp_config.grad_reduce_in_fp32 else param.dtype``).
    - at most one of ``--pipeline-model-parallel-layout`` and
      ``--num-virtual-stages-per-pipeline-rank`` (arguments.py "No more than one of the
      following arguments can be set at the same time"): the layout form carries vpp itself.
    """
    par, train = plan.parallel, plan.cluster.settings
    tp, ep = int(par.tp), int(par.ep)
    moe = is_moe(plan)
    size = int(plan.microbatches.size)
    s: dict[str, Any] = {"tensor_model_parallel_size": tp, "sequence_parallel": tp > 1}
    if par.cp_size > 1:  # Megatron's --context-parallel-size (megatron/training/arguments.py)
        s["context_parallel_size"] = par.cp_size
        if train.get("cp_comm_type") == "p2p":  # --cp-comm-type (arguments.py; TransformerConfig.cp_comm_type)
            s["cp_comm_type"] = "p2p"
    if moe:
        s.update(expert_model_parallel_size=ep, expert_tensor_parallel_size=par.etp_size,
                 moe_grouped_gemm=True)
    s.update(micro_batch_size=size, global_batch_size=plan.num_microbatches * size * int(par.get("dp", 1)))
    seq = train.get("seq_len")
    if seq:
        s.update(seq_length=int(seq), max_position_embeddings=int(seq))
    precision = train.get("precision", "bf16")
    s.update(bf16=precision == "bf16" or (overlap and precision != "fp16"), fp16=precision == "fp16")
    s["use_distributed_optimizer"] = bool(train.get("distributed_optimizer", True))
    s["grad_reduce_in_bf16"] = not bool(train.get("grad_reduce_in_fp32", True))
    s.update(recompute_settings(plan))
    s.update(offload_settings(plan))
    capacity = train.get("moe_expert_capacity_factor") if moe else None
    if moe:  # Megatron's capacity mode when the plan was costed with it, else dropless (None, False)
        s.update(moe_expert_capacity_factor=None if capacity is None else float(capacity),
                 moe_pad_expert_input_to_capacity=capacity is not None
                 and bool(train.get("moe_pad_expert_input_to_capacity")))
    s["moe_token_dispatcher_type"] = "alltoall" if overlap or (moe and ep > 1) else None
    s.update(cuda_graph_settings(plan))
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if tp > 1 and not overlap else {}
    return Companions(settings=s, args=render(s), env=env)
