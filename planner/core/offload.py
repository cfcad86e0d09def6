"""Activation offloading as Megatron-Core names it: a mode string a plan carries as text.

Two forms, both Megatron-Core 0.16.1's own vocabulary:

- ``layers:N``: ``--cpu-offloading --cpu-offloading-num-layers N`` (megatron/core/
  model_parallel_config.py ``cpu_offloading``, ``cpu_offloading_num_layers``,
  ``cpu_offloading_activations``): Transformer Engine's layer-level offload context
  (megatron/core/extensions/transformer_engine.py ``get_cpu_offload_context``), the saved
  activations of the first N of the rank's layers copied to the host after each layer's
  forward and back before its backward. Megatron refuses it with pipeline parallelism, with
  activation recomputation and with CUDA graphs (transformer_config.py ``__post_init__``).
- ``modules:a,b``: ``--fine-grained-activation-offloading --offload-modules a b``
  (transformer_config.py ``fine_grained_activation_offloading``, ``offload_modules``): the
  inputs of the named sub-modules of every layer, on their own D2H and H2D streams
  (megatron/core/pipeline_parallel/fine_grained_activation_offload.py
  ``PipelineOffloadManager``).

What each form moves and costs is ``profiler.cost_model.offload``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planner.core.errors import InputError

__all__ = ["NONE", "OFFLOAD_MODULES", "COSTED_MODULES", "CHOICE_SEP", "offload_mode", "offload_layers",
           "offload_modules", "offload_choices", "is_offload"]

NONE = "none"
"""No activation offloading (the default)."""
OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")
"""Megatron-Core's ``offload_modules`` choices (transformer_config.py, its docstring's order)."""
COSTED_MODULES = ("attn_norm", "qkv_linear", "mlp_norm", "expert_fc1", "moe_act")
"""The modules whose input the cost model sizes (``profiler.cost_model.offload``); core_attn and
attn_proj (the attention core's q, k, v and output) are refused on load as not modelled."""
_LAYERS, _MODULES = "layers:", "modules:"
CHOICE_SEP = ";"
"""Between the modes of a choice (``none;modules:expert_fc1,moe_act``): the planner plans with
each and keeps the fastest plan that fits (``planner.planning.offload_choice``), as several
recompute module lists are a choice (``planner.core.recompute.CHOICE_SEP``)."""


def is_offload(mode: str) -> bool:
    """Whether ``mode`` offloads anything."""
    return mode != NONE


def offload_layers(mode: str) -> int:
    """Layers of ``--cpu-offloading-num-layers`` (0 unless the layer-level form)."""
    return int(mode[len(_LAYERS):]) if mode.startswith(_LAYERS) else 0


def offload_modules(mode: str) -> tuple[str, ...]:
    """Modules of ``--offload-modules`` (empty unless the fine-grained form)."""
    return tuple(mode[len(_MODULES):].split(",")) if mode.startswith(_MODULES) else ()


def offload_choices(mode: str) -> tuple[str, ...]:
    """The modes of a choice (one mode: itself)."""
    return tuple(mode.split(CHOICE_SEP))


def offload_mode(value: Any, *, field: str) -> str:
    """The canonical mode of what a cluster file or the CLI says: ``none``, a number of layers
    (``40``), a list of module names (``[expert_fc1, moe_act]``, or ``expert_fc1,moe_act``), an
    already canonical mode string, or a choice of those: a list holding ``none``, numbers or
    module lists (``[none, [expert_fc1, moe_act]]``), or a ``CHOICE_SEP``-joined string.
    ``InputError`` (one line) on anything else."""
    if isinstance(value, str) and CHOICE_SEP in value:
        value = value.split(CHOICE_SEP)
    if isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple, int)) or v == NONE for v in value):
        if len(value) < 2:
            return offload_mode(value[0], field=field) if value else offload_mode([], field=field)
        return CHOICE_SEP.join(dict.fromkeys(offload_mode(v, field=field) for v in value))
    if isinstance(value, bool):
        raise InputError(field, f"expected none, a number of layers or a list of modules, got {value!r}",
                         'quote the word: offload: "none"')
    if isinstance(value, int):
        if value < 1:
            raise InputError(field, f"{value} layers", "give at least 1 layer (--cpu-offloading-num-layers), or none")
        return f"{_LAYERS}{value}"
    if isinstance(value, str):
        text = value.strip()
        if text == NONE:
            return NONE
        if text.startswith(_LAYERS):
            text = text[len(_LAYERS):]
        if text.isdigit():
            return offload_mode(int(text), field=field)
        if text.startswith(_MODULES):
            text = text[len(_MODULES):]
        value = [n for n in text.split(",") if n.strip()]
    if isinstance(value, Sequence) and not isinstance(value, str):
        names = [str(n).strip() for n in value]
        bad = [n for n in names if n not in OFFLOAD_MODULES]
        if bad or not names:
            raise InputError(field, f"unknown offload module {bad[0]!r}" if bad else "no module given",
                             f"use some of {', '.join(OFFLOAD_MODULES)} (Megatron's --offload-modules), "
                             "a number of layers, or none")
        unmodelled = [n for n in names if n not in COSTED_MODULES]
        if unmodelled:
            raise InputError(field, f"offloading {unmodelled[0]}'s input is not modelled",
                             f"use some of {', '.join(COSTED_MODULES)}")
        return _MODULES + ",".join(m for m in OFFLOAD_MODULES if m in names)
    raise InputError(field, f"expected none, a number of layers or a list of modules, got {value!r}")
