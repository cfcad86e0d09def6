"""ppplan: an overlap-aware pipeline-parallel planner.

Public API for launchers::

    from planner import plan, load_plan, replan

    p = plan("qwen3-30b-a3b", pp=4, vpp=2)      # keyword options mirror ``ppplan plan``
    p = plan("qwen3-30b-a3b", None, PlanOptions(pp=4, vpp=2))  # the same as one record
    p.stage_layers(rank=0); p.actions(rank=0)   # layer ranges and actions of one rank
    p.megatron_args(); p.torchtitan_options(); p.torch_csv(); p.to_json()

``plan`` and ``load_plan`` are ``planner.api``'s, ``replan`` is ``planner.replanning``'s: one
return type, ``planner.export.LaunchPlan`` (a ``Plan`` with the launchers' views), whichever
module it is called from ([Note: delivered plans] in ``planner.planning.delivery``). Names
are resolved on first use, so ``import planner`` stays light and works before optional parts
exist. The re-planning code lives in the sub-package ``planner.replanning``, so the API name
``replan`` is never shadowed by a submodule.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["plan", "load_plan", "replan", "LaunchPlan", "PlanOptions"]

_SOURCES = {"plan": ("planner.api", "plan"), "load_plan": ("planner.api", "load_plan"),
            "replan": ("planner.replanning", "replan"), "LaunchPlan": ("planner.export", "LaunchPlan"),
            "PlanOptions": ("planner.options", "PlanOptions")}


def __getattr__(name: str) -> Any:
    if name not in _SOURCES:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    module, attr = _SOURCES[name]
    try:
        value = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise ImportError(f"planner.{name} needs {module}, which this installation does not have") from None
    globals()[name] = value
    return value
