"""Plan -> overrides of a Megatron-Bridge recipe's ``ConfigContainer`` (``megatron/bridge/training/config.py``).

A Megatron-Bridge recipe (e.g. ``megatron.bridge.recipes.qwen.qwen3_moe.
qwen3_30b_a3b_pretrain_config()``) returns a ``ConfigContainer`` whose ``model`` is a
``GPTModelProvider`` (a Megatron-Core ``TransformerConfig`` subclass, so its fields carry the
Megatron argument names), ``dataset`` a ``GPTDatasetConfig`` (``seq_length``), ``train`` a
``TrainingConfig`` (``micro_batch_size``, ``global_batch_size``), ``optimizer``/``ddp`` the
distributed-optimizer switch and ``comm_overlap`` a ``CommOverlapConfig``
(``megatron/bridge/training/comm_overlap.py``: ``overlap_moe_expert_parallel_comm``,
``delay_wgrad_compute``). Recipes are overridden in Python or with a YAML file of
``section: {field: value}`` merged into the container (``megatron/bridge/training/utils/
omegaconf_utils.py``, ``process_config_with_overrides(config, config_filepath=...)``).

The values are the plan's Megatron export as values (``MegatronArgs.settings``, the same
refusals), never re-read from its argument string. Overriding a recipe differs from a
command line in one way: a field left out keeps the *recipe's* value, not Megatron's
default. So every field the plan decides is written, unset ones as None (or Megatron's
default): all four recomputation fields (Megatron-Core refuses ``recompute_num_layers`` with
selective recomputation and needs a method with full, ``transformer_config.py``), the MTP
count, the token dispatcher, and ``dataset.seq_length`` equal to ``model.seq_length``
(``ConfigContainer.validate`` asserts it).
"""

from __future__ import annotations

from typing import Any

from planner.core.plan import Plan
from planner.export.megatron import megatron_args
from planner.export.megatron_flags import is_moe
from planner.export.schedule import ExportError

__all__ = ["bridge_settings", "apply_plan_to_bridge", "bridge_overrides_yaml", "MODEL_FIELDS"]

MODEL_FIELDS = ("num_layers", "mtp_num_layers", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                "pipeline_model_parallel_layout", "virtual_pipeline_model_parallel_size", "sequence_parallel",
                "recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules", "bf16",
                "fp16", "seq_length", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute")
"""Megatron settings that are ``GPTModelProvider`` (``TransformerConfig``) fields of the same name."""

MOE_FIELDS = ("expert_model_parallel_size", "expert_tensor_parallel_size", "moe_grouped_gemm",
              "moe_token_dispatcher_type", "moe_expert_capacity_factor", "moe_pad_expert_input_to_capacity")
"""The same, for MoE models only (a dense ``TransformerConfig`` has no experts to place)."""

OFFLOAD_FIELDS = ("cpu_offloading", "cpu_offloading_num_layers", "fine_grained_activation_offloading",
                  "offload_modules")
"""Activation offloading, ``TransformerConfig`` fields too (``megatron_flags.offload_settings``);
written only for a plan that offloads, so a recipe's own offloading is kept otherwise."""

_FMT = "megatron-bridge"

_DEFAULT_DISPATCHER = "allgather"
"""Megatron's ``--moe-token-dispatcher-type`` default (``megatron/training/arguments.py``) and
``TransformerConfig.moe_token_dispatcher_type``'s: what a command line without the flag runs."""


def bridge_settings(plan: Plan) -> dict[str, Any]:
    """{"model", "dataset", "train", "optimizer", "ddp", "comm_overlap"} -> fields, and
    "mixed_precision" -> the name of Bridge's registered precision config for the plan's
    precision (``megatron/bridge/training/mixed_precision.py``: ``bf16_mixed``, ``fp16_mixed``;
    Bridge copies its dtypes onto the model, so the model's own ``bf16`` alone would be
    overwritten). Other precisions keep the recipe's.
    """
    try:
        s = megatron_args(plan).settings
    except ExportError as exc:  # the same refusal, named for this format
        raise ExportError(_FMT, exc.problem, exc.fix, replan=False) from None
    fields = MODEL_FIELDS + (MOE_FIELDS if is_moe(plan) else ())
    model = {k: s.get(k) for k in fields if k != "seq_length" or s.get(k) is not None}
    model.update({k: s[k] for k in OFFLOAD_FIELDS if k in s})  # only when the plan offloads
    model["virtual_pipeline_model_parallel_size"] = s["virtual_pipeline_model_parallel_size"]
    if model["virtual_pipeline_model_parallel_size"] == 1:
        model["virtual_pipeline_model_parallel_size"] = None
    model["microbatch_group_size_per_vp_stage"] = s["microbatch_group_size_per_virtual_pipeline_stage"]
    if "moe_token_dispatcher_type" in model:
        model["moe_token_dispatcher_type"] = model["moe_token_dispatcher_type"] or _DEFAULT_DISPATCHER
    sharded = bool(s["use_distributed_optimizer"])
    out: dict[str, Any] = {
        "model": model,
        "train": {"micro_batch_size": s["micro_batch_size"], "global_batch_size": s["global_batch_size"]},
        "optimizer": {"use_distributed_optimizer": sharded}, "ddp": {"use_distributed_optimizer": sharded},
        "comm_overlap": {"overlap_moe_expert_parallel_comm": s["overlap_moe_expert_parallel_comm"],
                         "delay_wgrad_compute": s["delay_wgrad_compute"]},
    }
    if s["bf16"] or s["fp16"]:
        out["mixed_precision"] = "bf16_mixed" if s["bf16"] else "fp16_mixed"
    if s.get("seq_length") is not None:
        out["dataset"] = {"seq_length": s["seq_length"]}
    return out


def apply_plan_to_bridge(plan: Plan, config: Any) -> Any:
    """Set the plan on a Megatron-Bridge ``ConfigContainer`` (in place; also returned).

    ``config.comm_overlap`` is created (``CommOverlapConfig(tp_comm_overlap=False)``) when the
    recipe left it None and the plan runs the EP overlap; ``mixed_precision`` is set by name,
    as Bridge's own ``ConfigContainer`` accepts it.
    """
    settings = bridge_settings(plan)
    if config.comm_overlap is None and settings["comm_overlap"]["overlap_moe_expert_parallel_comm"]:
        from megatron.bridge.training.comm_overlap import CommOverlapConfig

        config.comm_overlap = CommOverlapConfig(tp_comm_overlap=False)
    for section, values in settings.items():
        if not isinstance(values, dict):  # mixed_precision: a whole value
            setattr(config, section, values)
            continue
        target = getattr(config, section)
        if target is None:  # no comm_overlap and nothing to overlap
            continue
        for key, value in values.items():
            setattr(target, key, value)
    return config


def bridge_overrides_yaml(plan: Plan) -> str:
    """The settings as a YAML override file (``process_config_with_overrides(config_filepath=...)``)."""
    import yaml

    settings = bridge_settings(plan)
    if settings["comm_overlap"]["overlap_moe_expert_parallel_comm"]:
        # [Note: Bridge comm_overlap] recipes leave comm_overlap None, and a plain mapping merged
        # over None would replace it with a dict: Bridge's override merge builds a `_target_`
        # (omegaconf_utils._apply_overrides), as apply_plan_to_bridge does
        settings["comm_overlap"] = {"_target_": "megatron.bridge.training.comm_overlap.CommOverlapConfig",
                                    "tp_comm_overlap": False, **settings["comm_overlap"]}
    else:  # the model's own overlap fields (False) are what Megatron-Core reads
        del settings["comm_overlap"]
    head = (f"# Megatron-Bridge recipe overrides from ppplan plan {plan.model.name!r}: "
            f"pp {plan.pp}, {plan.num_stages} stages, {plan.num_microbatches} microbatches.\n"
            "# Merge into a recipe's ConfigContainer: the recipe entry point's --config-file, or\n"
            "# megatron.bridge.training.utils.omegaconf_utils.process_config_with_overrides(\n"
            "#     cfg, config_filepath=THIS).\n")
    return head + yaml.safe_dump(settings, sort_keys=False, default_flow_style=False)
