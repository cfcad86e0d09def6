"""ppplan: an overlap-aware pipeline-parallel planner.

Public API for launchers::

    from planner import plan, load_plan, replan

    p = plan("qwen3-30b-a3b", pp=4, vpp=2)      # keyword options mirror ``ppplan plan``
    p = plan("qwen3-30b-a3b", None, PlanOptions(pp=4, vpp=2))  # the same as one record
    p.stage_layers(rank=0); p.actions(rank=0)   # layer ranges and actions of one rank
    p.megatron_args(); p.torchtitan_options(); p.torch_csv(); p.to_json()

Each returns a ``planner.export.LaunchPlan`` (a ``Plan``). Names are resolved on first
use, so ``import planner`` stays light and works before optional parts exist. The
re-planning code lives in the sub-package ``planner.replanning``, so the API name
``replan`` is never shadowed by a submodule.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

__all__ = ["plan", "load_plan", "replan", "LaunchPlan", "PlanOptions"]

_SOURCES = {"plan": ("planner.api", "plan"), "load_plan": ("planner.api", "load_plan"),
            "replan": ("planner.replanning", "replan")}


def _launching(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its result upgraded to ``LaunchPlan`` (same signature and docstring)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from planner.export import as_launch_plan

        return as_launch_plan(fn(*args, **kwargs))

    return wrapper


def __getattr__(name: str) -> Any:
    if name == "LaunchPlan":
        from planner.export import LaunchPlan

        return LaunchPlan
    if name == "PlanOptions":
        from planner.options import PlanOptions

        return PlanOptions
    if name not in _SOURCES:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    module, attr = _SOURCES[name]
    try:
        fn = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise ImportError(f"planner.{name} needs {module}, which this installation does not have") from None
    value = _launching(fn)
    globals()[name] = value
    return value
