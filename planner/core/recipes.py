"""Framework recipe defaults: the cluster fields a framework's own recipe sets for a model.

A cluster file states GPUs, degrees, batch and sequence length; the fields that decide
how fast the framework runs them (MoE dispatcher, CUDA graphs, FSDP, eager or fused
kernels, recomputation) are what the framework's published recipe for that model uses,
unless the file states them. ``apply_recipe(cluster, model, target)`` fills every field
the file left out from the recipe of ``--target`` for ``model``; a field the file states
always wins. ``--target torch`` and ``deepspeed`` have no recipe: the schema's defaults
stay.

Sources: at ``RECIPES``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.core.cluster import ClusterSpec

__all__ = ["Recipe", "RECIPES", "RECIPE_FIELDS", "RECIPE_CHOICES", "recipe_for", "apply_recipe"]

RECIPE_CHOICES = ("none", "megatron", "torchtitan")
"""What a cluster file's ``recipe`` may say: the framework whose recipe fills the fields the
file leaves out, or none (the schema's defaults)."""

RECIPE_FIELDS = ("training.fsdp", "training.kernels", "training.attention_kernel", "training.cross_entropy",
                 "training.fp8_recipe", "training.cuda_graphs", "training.recompute", "network.dispatcher")
"""Cluster fields a recipe may set (dotted paths as in the cluster file)."""


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """What one framework's recipe sets for one model."""

    values: dict[str, Any] = field(default_factory=dict)
    """Field path (one of ``RECIPE_FIELDS``) -> the recipe's value."""
    source: str = ""
    """Where the recipe says so (file and preset)."""


_MEGATRON = {"training.fsdp": False, "training.kernels": "fused", "training.attention_kernel": "cudnn",
             "training.cross_entropy": "fused", "training.fp8_recipe": "te", "training.cuda_graphs": False,
             "network.dispatcher": "alltoall"}
_TORCHTITAN = {"training.fsdp": True, "training.kernels": "eager", "training.attention_kernel": "flash2",
               "training.cross_entropy": "eager", "training.fp8_recipe": "torchao", "training.cuda_graphs": False,
               "network.dispatcher": "alltoall"}
_BRIDGE = "Megatron-Bridge scripts/performance/configs"

RECIPES: dict[tuple[str, str], Recipe] = {
    ("megatron", "*"): Recipe(values=_MEGATRON, source="Megatron-Core defaults"),
    ("megatron", "qwen3-30b-a3b"): Recipe(
        values={**_MEGATRON, "network.dispatcher": "hybridep", "training.cuda_graphs": True},
        source=f"{_BRIDGE}/qwen/qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_BF16_V1"),
    ("megatron", "qwen3-235b-a22b"): Recipe(
        values=_MEGATRON,
        source=f"{_BRIDGE}/qwen/qwen3_workload_base_configs.py QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_BF16_V1"),
    ("megatron", "deepseek-v3"): Recipe(
        values={**_MEGATRON, "network.dispatcher": "hybridep", "training.recompute": "selective"},
        source=f"{_BRIDGE}/deepseek/deepseek_workload_base_configs.py DEEPSEEK_V3_PRETRAIN_CONFIG_H100_V1"),
    ("torchtitan", "*"): Recipe(values=_TORCHTITAN, source="torchtitan job config defaults"),
    ("torchtitan", "llama3-8b"): Recipe(
        values={**_TORCHTITAN, "training.recompute": "op"},
        source="torchtitan/models/llama3/train_configs/llama3_8b.toml"),
}
"""(target, model id) -> recipe; ``"*"`` is the framework's default for models without one.

Sources (read at the commits named):

- megatron: Megatron-Bridge performance presets for H100 (BF16 preset where the FP8 one
  differs), https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/f29a269f8728ff9075f88a226f92e554196a7e41/scripts/performance/configs/qwen/qwen3_workload_base_configs.py
  (``QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_BF16_V1``: ``moe_flex_dispatcher_backend="hybridep"``,
  ``cuda_graph_scope=["moe_router", "moe_preprocess"]``; ``QWEN3_235B_A22B_..._H100_BF16_V1``:
  no flex backend, no CUDA graphs), https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/f0e2c37e3f82c57f9d0e95aa8ae98b3470a91107/scripts/performance/configs/deepseek/deepseek_workload_base_configs.py
  (``DEEPSEEK_V3_PRETRAIN_CONFIG_H100_V1``: HybridEP, ``recompute_modules=["mla_up_proj",
  "mlp"]``: selective), and Megatron-Core's defaults for the rest (Transformer Engine fused
  kernels, ``--use-distributed-optimizer`` without FSDP, NCCL all-to-all dispatcher).
- torchtitan: ``torchtitan/models/llama3/train_configs/llama3_8b.toml``
  (https://github.com/pytorch/torchtitan/blob/f3534d77b3876a3c042b60b18785272576d91e59/torchtitan/models/llama3/train_configs/llama3_8b.toml:
  ``compile = false``: eager; ``data_parallel_shard_degree = -1``: FSDP2 over every
  data-parallel rank; ``activation_checkpoint.mode = "selective"`` with
  ``selective_ac_option = "op"``: the per-op policy, ``op`` in ppplan, ``planner.core.op_sac``) and torchtitan's job
  config defaults for other models (no ``torch.compile``, FSDP2 sharding over the
  data-parallel ranks, MoE all-to-all through NCCL, no CUDA graphs: torchtitan refuses
  CUDA graphs with pipeline parallelism), and FlashAttention-2 for the attention core
  (torchtitan calls ``F.scaled_dot_product_attention``, whose default backend order puts
  flash first and cuDNN last: ``sdp_priority_order`` in
  https://github.com/pytorch/pytorch/blob/v2.7.0/aten/src/ATen/Context.h), and an eager
  loss: ``F.cross_entropy(pred.flatten(0, 1).float(), ...)`` (torchtitan/components/loss.py),
  and torchao's float8 for FP8 (``model.converters = ["float8"]``: torchao ``Float8Linear``).
"""


def recipe_for(target: str, model_name: str) -> Recipe | None:
    """The recipe ``target`` uses for ``model_name`` (None: the target has no recipe)."""
    return RECIPES.get((target, model_name), RECIPES.get((target, "*")))


def apply_recipe(cluster: "ClusterSpec", model_name: str, target: str) -> "ClusterSpec":
    """``cluster`` with each recipe field it leaves open set to ``target``'s recipe value for
    ``model_name``; unchanged for a target without a recipe. A field is open when the
    cluster file does not state it (``ClusterSpec.stated``) and it still holds the schema's
    default (so a CLI override such as ``--recompute none`` wins over the recipe too)."""
    recipe = recipe_for(target, model_name)
    if recipe is None:
        return cluster
    fill = {path: v for path, v in recipe.values.items()
            if path not in cluster.stated and _value(cluster, path) == _default(cluster, path)}
    training = {p.split(".", 1)[1]: v for p, v in fill.items() if p.startswith("training.")}
    network = {p.split(".", 1)[1]: v for p, v in fill.items() if p.startswith("network.")}
    return replace(cluster, training=replace(cluster.training, **training),
                   network=replace(cluster.network, **network)).check()


def _value(cluster: "ClusterSpec", path: str) -> Any:
    section, name = path.split(".", 1)
    return getattr(getattr(cluster, section), name)


def _default(cluster: "ClusterSpec", path: str) -> Any:
    section, name = path.split(".", 1)
    return next(f.default for f in fields(getattr(cluster, section)) if f.name == name)
