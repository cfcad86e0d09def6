"""Plan -> a Megatron-Bridge recipe's ``ConfigContainer`` (``megatron/bridge/training/config.py``).

A Megatron-Bridge recipe (e.g. ``megatron.bridge.recipes.qwen.qwen3_moe.
qwen3_30b_a3b_pretrain_config()``) returns a ``ConfigContainer`` whose ``model`` is a
``GPTModelProvider`` (a Megatron-Core ``TransformerConfig`` subclass, so its fields carry
the Megatron flag names), ``train`` a ``TrainingConfig`` (``micro_batch_size``,
``global_batch_size``), ``optimizer``/``ddp`` the distributed-optimizer switch and
``comm_overlap`` a ``CommOverlapConfig`` (``megatron/bridge/training/comm_overlap.py``:
``overlap_moe_expert_parallel_comm``, ``delay_wgrad_compute``). ``apply_plan_to_bridge``
writes the plan's Megatron export (``planner.export.megatron``, the same flags and the
same refusals) into those objects: pipeline layout and virtual stages, parallel sizes,
recomputation, MoE dispatcher and overlap switches, micro-batch size and count.
"""

from __future__ import annotations

from typing import Any

from planner.core.plan import Plan
from planner.export.megatron import megatron_args

__all__ = ["bridge_settings", "apply_plan_to_bridge", "MODEL_FLAGS"]

MODEL_FLAGS = ("num_layers", "mtp_num_layers", "tensor_model_parallel_size", "pipeline_model_parallel_size",
               "pipeline_model_parallel_layout", "expert_model_parallel_size", "expert_tensor_parallel_size",
               "sequence_parallel", "moe_grouped_gemm", "moe_token_dispatcher_type", "recompute_granularity",
               "recompute_method", "recompute_num_layers", "recompute_modules", "bf16", "fp16", "seq_length")
"""Megatron flags that are ``GPTModelProvider`` (``TransformerConfig``) fields of the same name."""

_LISTS = ("recompute_modules",)
_INTS = ("num_layers", "mtp_num_layers", "tensor_model_parallel_size", "pipeline_model_parallel_size",
         "expert_model_parallel_size", "expert_tensor_parallel_size", "recompute_num_layers", "seq_length",
         "micro_batch_size", "global_batch_size", "microbatch_group_size_per_virtual_pipeline_stage")


def _parse(args: list[str]) -> dict[str, Any]:
    """``--name value(s)`` -> {name: value}; switches -> True."""
    out: dict[str, Any] = {}
    key = None
    for a in args:
        if a.startswith("--"):
            key = a[2:].replace("-", "_")
            out[key] = [] if key in _LISTS else True
        elif key in _LISTS:
            out[key].append(a)
        else:
            out[key] = int(a) if key in _INTS else a
    return out


def bridge_settings(plan: Plan) -> dict[str, dict[str, Any]]:
    """{"model", "train", "optimizer", "ddp", "comm_overlap"} -> fields to set, from the Megatron export."""
    flags = _parse(megatron_args(plan).args)
    model = {k: flags[k] for k in MODEL_FLAGS if k in flags}
    vpp = plan.num_stages // plan.pp
    model["virtual_pipeline_model_parallel_size"] = vpp if vpp > 1 else None
    if "microbatch_group_size_per_virtual_pipeline_stage" in flags:
        model["microbatch_group_size_per_vp_stage"] = flags["microbatch_group_size_per_virtual_pipeline_stage"]
    overlap = bool(flags.get("overlap_moe_expert_parallel_comm"))
    sharded = bool(flags.get("use_distributed_optimizer"))
    return {"model": model,
            "train": {"micro_batch_size": flags["micro_batch_size"], "global_batch_size": flags["global_batch_size"]},
            "optimizer": {"use_distributed_optimizer": sharded}, "ddp": {"use_distributed_optimizer": sharded},
            "comm_overlap": {"overlap_moe_expert_parallel_comm": overlap,
                             "delay_wgrad_compute": bool(flags.get("delay_wgrad_compute"))}}


def apply_plan_to_bridge(plan: Plan, config: Any) -> Any:
    """Set the plan on a Megatron-Bridge ``ConfigContainer`` (in place; also returned).

    ``config.comm_overlap`` is created (``CommOverlapConfig(tp_comm_overlap=False)``) when the
    recipe left it None and the plan runs the EP overlap.
    """
    settings = bridge_settings(plan)
    if config.comm_overlap is None and settings["comm_overlap"]["overlap_moe_expert_parallel_comm"]:
        from megatron.bridge.training.comm_overlap import CommOverlapConfig

        config.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
    for section, values in settings.items():
        target = getattr(config, section)
        if target is None:  # no comm_overlap and nothing to overlap
            continue
        for key, value in values.items():
            setattr(target, key, value)
    return config
