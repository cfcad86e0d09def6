"""Upper bounds on what an input may ask for, checked before anything is allocated.

A config with ``num_hidden_layers: 1e9`` (read by JSON as a float, or written as
1000000000) would otherwise build a billion ``LayerSpec``s and grow memory without
bound before any other check runs. Every limit is far above the largest public model
it guards (numbers from the models' own Hugging Face ``config.json``):

- layers: Llama 3.1 405B has 126 decoder layers; DeepSeek-V3 61. The cap, 512, is what the
  default search plans within a minute on the 2-core reference machine: the partition's
  range table grows with the square of the layer count (measured in docs/reliability.md).
- hidden size: Llama 3.1 405B 16384; intermediate sizes: 53248 (Llama 3.1 405B).
- experts: DeepSeek-V3 256 routed, Qwen3-Next 512; top-k 8 and 10.
- vocabulary: Gemma 3 262144; attention heads: 128 (Llama 3.1 405B, DeepSeek-V3).
- microbatches x stages: the schedule holds 3 tasks (F, I, W) per pair; 2^17 pairs
  is 1024 microbatches on 128 stages, beyond any published run.
"""

from __future__ import annotations

from planner.core.errors import InputError

__all__ = ["CONFIG_LIMITS", "POSITIVE_CONFIG_FIELDS", "MAX_STAGE_MICROBATCHES", "check_config_value",
           "check_stage_microbatches", "COST_LIMITS", "check_cost_value", "MAX_TABLE_LAYERS", "BATCH_LIMITS",
           "check_batch_value", "MAX_GPUS", "MAX_TOKEN_COUNT"]

_LAYERS, _WIDTH, _FFN, _EXPERTS, _HEADS = 512, 1 << 18, 1 << 21, 1 << 16, 1 << 12

CONFIG_LIMITS: dict[str, int] = {
    "num_hidden_layers": _LAYERS, "num_nextn_predict_layers": _LAYERS, "first_k_dense_replace": _LAYERS,
    "hidden_size": _WIDTH, "vocab_size": 1 << 24, "head_dim": _WIDTH,
    "intermediate_size": _FFN, "moe_intermediate_size": _FFN, "shared_expert_intermediate_size": _FFN,
    "num_experts": _EXPERTS, "n_routed_experts": _EXPERTS, "n_shared_experts": _EXPERTS,
    "num_experts_per_tok": _EXPERTS, "n_group": _EXPERTS, "topk_group": _EXPERTS,
    "num_attention_heads": _HEADS, "num_key_value_heads": _HEADS,
    "linear_num_key_heads": _HEADS, "linear_num_value_heads": _HEADS,
    "linear_key_head_dim": _WIDTH, "linear_value_head_dim": _WIDTH, "linear_conv_kernel_dim": 1 << 10,
    "q_lora_rank": _WIDTH, "kv_lora_rank": _WIDTH, "qk_nope_head_dim": _WIDTH, "qk_rope_head_dim": _WIDTH,
    "v_head_dim": _WIDTH, "decoder_sparse_step": _LAYERS, "full_attention_interval": _LAYERS,
}
"""config.json field -> the largest value the planner accepts."""

POSITIVE_CONFIG_FIELDS = frozenset({
    "hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "decoder_sparse_step", "full_attention_interval", "moe_intermediate_size", "linear_num_key_heads",
    "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
    "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"})
"""Fields where 0 makes no model (a zero vocabulary has no embedding to plan; a zero
``decoder_sparse_step`` or ``full_attention_interval`` has no layer pattern: Hugging Face
divides by it)."""

MAX_TABLE_LAYERS = _LAYERS + 2
"""Most entries a cost table may hold: the embedding, up to the layer limit of decoder layers
and MTP modules, and the head."""

BATCH_LIMITS: dict[str, int] = {"microbatch_size": 1 << 16, "seq_len": 1 << 24, "global_batch": 1 << 30}
"""Sequences per microbatch (Llama 3.1 405B trained with 16M-token batches: 2048 sequences),
tokens per sequence (1M-token contexts are the longest published), sequences per step."""

MAX_GPUS = 1 << 24
"""GPUs in one job (the largest published runs use about 10^5)."""

MAX_TOKEN_COUNT = float(2**40)
"""Largest token count of one expert in one routing record: a trillion copies, 10^4 times the
copies a 16M-token batch routed top-8 makes in all."""

MAX_STAGE_MICROBATCHES = 1 << 17
"""Largest microbatches x pipeline stages a plan may hold (see the module doc)."""


def check_config_value(key: str, value: int) -> None:
    """Raise ``InputError`` naming ``config.key`` when ``value`` is 0 where it may not be, or
    above ``CONFIG_LIMITS``."""
    if value == 0 and key in POSITIVE_CONFIG_FIELDS:
        raise InputError(f"config.{key}", "must be positive", f"set '{key}' to the model's value")
    limit = CONFIG_LIMITS.get(key)
    if limit is not None and value > limit:
        raise InputError(f"config.{key}", f"{value} is above the planner's limit of {limit}",
                         "check the config.json; the limits are in planner/core/limits.py")


def check_stage_microbatches(microbatches: int, stages: int, *, field: str = "--microbatches") -> None:
    """Refuse a schedule of more than ``MAX_STAGE_MICROBATCHES`` (microbatch, stage) pairs."""
    if microbatches * stages > MAX_STAGE_MICROBATCHES:
        raise InputError(field, f"{microbatches} microbatches x {stages} stages = {microbatches * stages} is "
                         f"above the planner's limit of {MAX_STAGE_MICROBATCHES}",
                         "use fewer microbatches (a larger micro-batch size) or fewer stages")


def check_batch_value(field: str, key: str, value: object) -> None:
    """Raise ``InputError`` naming ``field`` unless ``value`` is an integer in 1..``BATCH_LIMITS[key]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BATCH_LIMITS[key]:
        raise InputError(field, f"expected an integer in 1..{BATCH_LIMITS[key]}, got {value!r:.40}",
                         "the limits are in planner/core/limits.py")


COST_LIMITS: dict[str, float] = {"seconds": 1e6, "bytes": float(2**60), "flops": 1e24, "factor": 1e6}
"""Largest value of a measured cost, by unit: a million seconds per layer and microbatch,
an exabyte, 10^24 FLOPs per layer and microbatch (a Llama 3.1 405B layer on an 8k-token
microbatch is about 2e14), a routing factor of 10^6. Above these, sums overflow floats."""


def check_cost_value(field: str, value: object, unit: str) -> None:
    """Raise ``InputError`` naming ``field`` unless ``value`` is a number in [0, ``COST_LIMITS[unit]``]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(field, f"expected a number, got {value!r:.40}")
    if not 0 <= value <= COST_LIMITS[unit]:
        raise InputError(field, f"{value!r:.40} is outside 0..{COST_LIMITS[unit]:g} {unit}",
                         "give the measured value in SI units")
