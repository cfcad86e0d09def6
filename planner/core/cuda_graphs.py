"""CUDA-graph scopes as Megatron-Core 0.16.1 names them, and what each takes off the host.

``training.cuda_graph_scope`` is Megatron's ``--cuda-graph-scope``: a list of
``CudaGraphScope`` names (megatron/core/transformer/enums.py ``CudaGraphScope``:
``full_iteration``, ``attn``, ``mlp``, ``moe``, ``moe_router``, ``moe_preprocess``,
``mamba``), ``full`` (Megatron's deprecated default: the whole layer, the same as an empty
list, ``TransformerConfig.__post_init__``), ``none`` (no graphs), or ``auto`` (what
``training.cuda_graphs`` says: true is ``moe_router moe_preprocess``, the scope that field
has always meant, false is none).

What the cost model takes off: the fitted per-MoE-layer host time
(``FittedConstants.moe_layer_overhead_s``: router and permutation launches and the
device-to-host copy of the token counts) is not charged when the MoE preprocessing runs in a
graph (``moe_preprocess``, which Megatron only accepts with ``moe_router``), when the whole
MoE layer does (``moe``, drop-and-pad only), the whole layer (``full``) or the whole
iteration (``full_iteration``). ``moe_router`` alone leaves the preprocessing's
synchronisation on the host, so the overhead stays. ``attn``, ``mlp`` and ``mamba`` graph
parts the model charges no host time for (their launches hide behind the GPU's work), so
they change no figure; the export still passes them on.

Megatron's checks, kept here so a cluster file fails on load as Megatron would fail at
start (transformer_config.py ``TransformerConfig.__post_init__``): ``moe_preprocess`` needs
``moe_router``; ``moe`` and ``moe_router`` exclude each other; ``full_iteration`` runs only
under ``--cuda-graph-impl local`` (so it is given alone here: the export picks the impl);
``moe`` needs drop-and-pad (``moe_expert_capacity_factor`` with
``moe_pad_expert_input_to_capacity``); MoE scopes need an MoE model, ``mlp`` a dense layer;
full recomputation runs only under ``full_iteration`` (a stated scope with ``recompute: full``
is refused; under ``auto`` recomputation the full mode is costed and exported ungraphed:
``scopes_of``).
"""

from __future__ import annotations

from typing import Any

from planner.core.errors import InputError

__all__ = ["CUDA_GRAPH_SCOPES", "SCOPE_CHOICES", "normalize_scope", "scopes_of", "graph_scopes", "moe_host_graphed",
           "graph_impl", "check_scope", "check_scope_against"]

CUDA_GRAPH_SCOPES = ("full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba")
"""megatron-core 0.16.1 ``CudaGraphScope`` members (megatron/core/transformer/enums.py)."""
SCOPE_CHOICES = ("auto", "none", "full")
"""Words ``training.cuda_graph_scope`` may say instead of a list (module doc)."""
_MOE_HOST = {"moe_preprocess", "moe", "full", "full_iteration"}
"""Scopes that take the MoE layer's host synchronisation into a graph (module doc)."""


def normalize_scope(value: Any, *, field: str = "training.cuda_graph_scope") -> str:
    """The field as stored: a word of ``SCOPE_CHOICES`` or scope names joined by commas
    (a YAML list, or a string with commas or spaces)."""
    if isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise InputError(field, f"expected scope names, got {value!r}",
                             f"use names of {', '.join(CUDA_GRAPH_SCOPES)}")
        return ",".join(value) if value else "full"  # Megatron: an empty list is the whole layer
    if not isinstance(value, str):
        raise InputError(field, f"expected a list of scope names, got {value!r}",
                         f"e.g. [moe_router, moe_preprocess], or one of {', '.join(SCOPE_CHOICES)}")
    return ",".join(value.replace(",", " ").split()) or "none"


def scopes_of(scope: str, cuda_graphs: bool, recompute: Any = "none") -> tuple[str, ...]:
    """The scopes graphed under a stored ``cuda_graph_scope`` and ``cuda_graphs`` for a plan
    with recomputation mode ``recompute``: () for none, ("full",) for whole layers. Megatron
    runs full recomputation only under a ``full_iteration`` graph (transformer_config.py "full
    recompute is only supported with full iteration CUDA graph"), so a full-recompute plan runs
    its layers ungraphed: costed so, exported without graph flags."""
    if scope == "auto":
        scopes: tuple[str, ...] = ("moe_router", "moe_preprocess") if cuda_graphs else ()
    else:
        scopes = () if scope == "none" else tuple(scope.split(","))
    return () if recompute == "full" and scopes != ("full_iteration",) else scopes


def graph_scopes(training: Any) -> tuple[str, ...]:
    """The scopes a ``TrainingSpec`` graphs under its recomputation mode (``scopes_of``)."""
    return scopes_of(training.cuda_graph_scope, training.cuda_graphs, training.recompute)


def moe_host_graphed(training: Any) -> bool:
    """Whether the MoE layers' host work runs inside CUDA graphs (no ``moe_layer_overhead_s``)."""
    return bool(_MOE_HOST.intersection(graph_scopes(training)))


def graph_impl(scopes: tuple[str, ...], *, recompute_moe: bool = False) -> str:
    """Megatron's ``--cuda-graph-impl`` for ``scopes``: ``local`` for the whole iteration (the
    only impl that captures it) and for router graphs beside the ``moe`` recompute module
    (transformer_config.py: "moe recompute is not supported with moe_router CUDA graph with:
    --cuda-graph-impl transformer_engine"), ``transformer_engine`` (TE
    ``make_graphed_callables``, what the Megatron-Bridge presets use for layer scopes)
    otherwise, ``none`` without graphs."""
    if not scopes:
        return "none"
    local = "full_iteration" in scopes or (recompute_moe and "moe_router" in scopes)
    return "local" if local else "transformer_engine"


def check_scope(training: Any, stated: frozenset[str] | set[str]) -> None:
    """Megatron's model-free scope checks (module doc); one-line ``InputError``."""
    field = "training.cuda_graph_scope"
    scope = training.cuda_graph_scope
    if scope in SCOPE_CHOICES:
        names: tuple[str, ...] = ()
    else:
        names = tuple(scope.split(","))
        bad = [n for n in names if n not in CUDA_GRAPH_SCOPES]
        if bad:
            raise InputError(field, f"unknown scope {bad[0]!r}",
                             f"use {', '.join(CUDA_GRAPH_SCOPES)}, or one of {', '.join(SCOPE_CHOICES)}")
    if "full_iteration" in names and len(names) > 1:
        raise InputError(field, "full_iteration graphs the whole iteration", "give it alone")
    if "moe_preprocess" in names and "moe_router" not in names:
        raise InputError(field, "moe_preprocess needs moe_router (Megatron's check)", "add moe_router")
    if "moe" in names and "moe_router" in names:
        raise InputError(field, "moe and moe_router exclude each other (Megatron's check)", "keep one")
    if "moe" in names and not (training.moe_expert_capacity_factor is not None
                               and training.moe_pad_expert_input_to_capacity):
        raise InputError(field, "moe graphs only drop-and-pad MoE layers (Megatron's check)",
                         "set moe_expert_capacity_factor and moe_pad_expert_input_to_capacity, or use "
                         "moe_router, moe_preprocess")
    if names and names != ("full_iteration",) and training.recompute == "full":
        raise InputError(field, f"Megatron runs recompute: full only under a full_iteration graph, not "
                         f"{' '.join(names)} (its check)", "use full_iteration, or another recompute mode")
    if "training.cuda_graphs" in stated and scope != "auto" and training.cuda_graphs != (scope != "none"):
        raise InputError(field, f"{scope!r} contradicts cuda_graphs: {str(training.cuda_graphs).lower()}",
                         "leave cuda_graphs out or make them agree")


def check_scope_against(training: Any, *, moe: bool, all_moe: bool) -> None:
    """Megatron's model checks: MoE scopes need MoE layers, ``mlp`` a dense one."""
    names = set(graph_scopes(training)) if training.cuda_graph_scope != "auto" else set()
    if not moe and names & {"moe", "moe_router", "moe_preprocess"}:
        raise InputError("training.cuda_graph_scope", "MoE scopes on a model without MoE layers",
                         "drop moe, moe_router and moe_preprocess")
    if all_moe and "mlp" in names:
        raise InputError("training.cuda_graph_scope", "mlp graphs dense MLPs, the model has none",
                         "drop mlp (use moe_router, moe_preprocess)")
