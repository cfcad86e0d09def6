"""The Megatron-LM flags a plan needs besides its layout: parallel sizes, batch, precision,
recomputation and the companion flags Megatron's own checks demand.

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
- ``--use-distributed-optimizer`` when the plan's memory assumed a sharded optimizer
  (cluster ``training.distributed_optimizer``).
- at most one of ``--pipeline-model-parallel-layout`` and
  ``--num-virtual-stages-per-pipeline-rank`` (arguments.py "No more than one of the
  following arguments can be set at the same time"): the layout form carries vpp itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.plan import Plan

__all__ = ["Companions", "companion_flags", "recompute_args", "is_moe", "RECOMPUTE_MODULES"]

RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm")
"""Selective recomputation modules (what ``profiler.analytical`` costs for selective:
attention core, MoE activation, norms)."""


@dataclass(frozen=True, kw_only=True)
class Companions:
    """Flags besides the layout and schedule switches, and environment variables."""

    args: list[str]
    """Command-line flags."""
    env: dict[str, str]
    """Environment variables the launcher must set."""


def is_moe(plan: Plan) -> bool:
    """Whether any layer of the plan's model is MoE (``model.layer_types``)."""
    return any("moe" in str(t) for t in plan.model.get("layer_types", []))


def recompute_args(plan: Plan) -> list[str]:
    """Megatron options for the plan's recomputation mode (none for none)."""
    mode = plan.cluster.get("training", {}).get("recompute") or "none"
    if mode == "selective":
        modules = [m for m in RECOMPUTE_MODULES if m != "moe_act" or is_moe(plan)]
        return ["--recompute-granularity", "selective", "--recompute-modules", *modules]
    if mode == "full":
        return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    return []


def companion_flags(plan: Plan, *, overlap: bool) -> Companions:
    """Parallel sizes, batch, precision and recomputation flags with their companions.

    ``overlap``: the plan runs Megatron's EP overlap (``--overlap-moe-expert-parallel-comm``).
    """
    par, train = plan.parallel, plan.cluster.get("training", {})
    tp, ep = int(par.get("tp", 1)), int(par.get("ep", 1))
    moe = is_moe(plan)
    size = int(plan.microbatches.get("size", 1))
    args = ["--tensor-model-parallel-size", str(tp)]
    if tp > 1:
        args.append("--sequence-parallel")
    if moe:
        args += ["--expert-model-parallel-size", str(ep),
                 "--expert-tensor-parallel-size", str(int(par.get("etp", 1))), "--moe-grouped-gemm"]
    args += ["--micro-batch-size", str(size),
             "--global-batch-size", str(plan.num_microbatches * size * int(par.get("dp", 1)))]
    seq = train.get("seq_len")
    if seq:
        args += ["--seq-length", str(int(seq)), "--max-position-embeddings", str(int(seq))]
    precision = train.get("precision", "bf16")
    if precision in ("bf16", "fp16"):
        args.append(f"--{precision}")
    elif overlap:
        args.append("--bf16")
    if train.get("distributed_optimizer", True):
        args.append("--use-distributed-optimizer")
    args += recompute_args(plan)
    capacity = train.get("moe_expert_capacity_factor") if moe else None
    if capacity is not None:  # Megatron's capacity mode, as the plan was costed
        args += ["--moe-expert-capacity-factor", f"{float(capacity):g}"]
        if train.get("moe_pad_expert_input_to_capacity"):
            args.append("--moe-pad-expert-input-to-capacity")
    if overlap or (moe and ep > 1):
        args += ["--moe-token-dispatcher-type", "alltoall"]
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if tp > 1 and not overlap else {}
    return Companions(args=args, env=env)
