"""Layers built from transformers' own model code, for the profiler and the replay.

``build_hf_layer(model, layer, raw=config.json dict, scale=..., ep_group=...)`` returns
the same kind of module as ``profiler.layers.build_layer`` (a ``ProgramModule`` whose
``program()`` the profiler times segment by segment and whose ``forward`` trains),
but built from transformers' classes for the model's family at the reduced width
(``profiler.hf.config``): embedding, the family's decoder layer (``profiler.hf.layers``),
final norm and head. What transformers does not have stays native: multi-token
prediction layers (``profiler.layers.blocks.MtpLayer``). ``layer_source`` names the
library, its version and the class of each layer type.

Weights are drawn with ppplan's deterministic initialisation
(``profiler.layers.common.init_parameters``: one generator per (seed, layer, parameter
name)), so every pipeline stage and the single-process reference hold the same
numbers; norms transformers creates at zero (Qwen3-Next's ``1 + weight`` RMSNorm) stay
zero. transformers is an optional dependency (``pip install 'ppplan[hf]'``).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import torch
from torch import nn

from planner.core.errors import InputError
from planner.core.model import LayerSpec, ModelSpec
from profiler.layers.blocks import ProgramModule
from profiler.layers.common import init_parameters

__all__ = ["available", "build_hf_layer", "check_source", "layer_source", "family_classes", "MODULE_SOURCES",
           "SUPPORTED_FAMILIES"]

MODULE_SOURCES = ("transformers", "native")
"""Where the profiled and replayed layer modules come from."""
SUPPORTED_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "qwen3_next",
                      "mixtral", "deepseek_v2", "deepseek_v3")
"""``model_type`` values whose layers are built from transformers."""


def available() -> bool:
    """Whether transformers is installed."""
    return importlib.util.find_spec("transformers") is not None


def family_classes(config: Any) -> tuple[type[nn.Module], type[nn.Module], type[nn.Module]]:
    """(decoder layer, rotary embedding, RMSNorm) classes of ``config``'s family, read from
    the modeling module of the family's ``AutoModel`` class (its ``_no_split_modules``)."""
    from transformers import MODEL_MAPPING

    model_cls = MODEL_MAPPING[type(config)]
    module = sys.modules[model_cls.__module__]
    layer_name = model_cls._no_split_modules[0]
    prefix = layer_name.removesuffix("DecoderLayer")
    return getattr(module, layer_name), getattr(module, f"{prefix}RotaryEmbedding"), getattr(module, f"{prefix}RMSNorm")


def _check_family(raw: dict[str, Any]) -> None:
    if raw.get("model_type") not in SUPPORTED_FAMILIES:
        raise InputError("config.model_type", f"no transformers layers for {raw.get('model_type')!r}",
                         f"supported: {', '.join(SUPPORTED_FAMILIES)}; or use --modules native")


def check_source(model: ModelSpec, raw: dict[str, Any] | None, *, modules: str,
                 capacity: Any = None) -> None:
    """One-line ``InputError`` when ``model`` cannot be built from ``modules``."""
    if modules not in MODULE_SOURCES:
        raise InputError("--modules", f"unknown module source {modules!r}", f"use one of {', '.join(MODULE_SOURCES)}")
    if modules == "native":
        return
    if not available():
        raise InputError("--modules", "transformers is not installed",
                         "pip install 'ppplan[hf]', or use --modules native")
    if capacity is not None:
        raise InputError("--moe-expert-capacity-factor", "capacity mode is measured on native modules only",
                         "add --modules native")
    from profiler.hf.config import raw_config

    _check_family(raw if raw is not None else raw_config(model))


def _init(module: nn.Module, *, seed: int, layer_index: int) -> None:
    zero = [p for p in module.parameters() if p.dim() == 1 and not p.detach().any()]
    init_parameters(module, seed=seed, layer_index=layer_index)
    with torch.no_grad():
        for p in zero:
            p.zero_()


def build_hf_layer(model: ModelSpec, layer: LayerSpec, *, raw: dict[str, Any], scale: float = 1.0,
                   ep_group: Any = None, dtype: torch.dtype = torch.float32, seed: int = 0) -> ProgramModule:
    """The module of ``layer`` of ``model`` from transformers' classes at ``scale``; MoE
    experts split over ``ep_group`` as in ``profiler.layers.build_layer``."""
    from profiler.hf.config import hf_config
    from profiler.hf.layers import HfDecoderLayer, HfEmbedding, HfHead
    from profiler.layers import build_layer, scaled_model

    _check_family(raw)
    if layer.role == "mtp":
        return build_layer(model, layer, scale=scale, ep_group=ep_group, dtype=dtype, seed=seed)
    config = hf_config(raw, scaled_model(model, scale))
    layer_cls, rotary_cls, norm_cls = family_classes(config)
    module: ProgramModule
    if layer.role == "embedding":
        module = HfEmbedding(config)
    elif layer.role == "head":
        module = HfHead(config, norm_cls)
    else:
        module = HfDecoderLayer(layer_cls(config, layer.index - 1), rotary_cls(config), ep_group=ep_group)
    _init(module, seed=seed, layer_index=layer.index)
    if isinstance(module, HfDecoderLayer) and module.moe is not None:
        module.moe.keep_local()
    return module.to(dtype)


def _native_source(layer: LayerSpec) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("ppplan")
    except PackageNotFoundError:
        ours = "source"
    cls = {"embedding": "Embedding", "head": "Head", "mtp": "MtpLayer"}.get(layer.role, "DecoderLayer")
    return {"library": "ppplan", "version": ours, "class": f"profiler.layers.blocks.{cls}"}


def layer_source(model: ModelSpec, layer: LayerSpec, *, raw: dict[str, Any] | None, modules: str,
                 scale: float = 1.0) -> dict[str, str]:
    """Library, version and class that ``modules`` builds ``layer`` from."""
    if modules == "native" or layer.role == "mtp":
        return _native_source(layer)
    import transformers

    from profiler.hf.config import hf_config
    from profiler.layers import scaled_model

    layer_cls, _, norm_cls = family_classes(hf_config(raw, scaled_model(model, scale)))
    cls = {"embedding": "torch.nn.Embedding", "head": f"{norm_cls.__name__} + torch.nn.Linear"}.get(
        layer.role, layer_cls.__name__)
    return {"library": "transformers", "version": transformers.__version__, "class": cls}
