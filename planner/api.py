"""Python API for launchers: ``plan(...)`` mirrors ``ppplan plan`` option for option.

The public face only; each journey has its own module:

- ``plan``: ``planner.planning.front_door`` (the function ``ppplan plan`` calls);
- ``resolve_cluster`` (a cluster file or the model's default with the flags on top) and
  ``command_line_cluster``: ``planner.core.cluster_resolve``;
- ``model_section`` and ``cluster_section`` (the plan's records of both): ``planner.core.plan_sections``;
- ``PlanOptions`` and ``DEFAULT_MODEL``: ``planner.options``; ``load_model``: ``planner.core.hf_config``;
- ``load_plan``: here, a plan file read back as the ``LaunchPlan`` ``plan`` returns.
"""

from __future__ import annotations

from pathlib import Path

from planner.core.cluster_resolve import command_line_cluster, resolve_cluster
from planner.core.hf_config import load_model
from planner.core.plan import load_plan_file
from planner.core.plan_sections import cluster_section, model_section
from planner.export import LaunchPlan
from planner.options import DEFAULT_MODEL, PlanOptions
from planner.planning.front_door import plan

__all__ = ["plan", "load_plan", "PlanOptions", "DEFAULT_MODEL", "resolve_cluster", "model_section"]
# cluster_section, command_line_cluster and load_model are imported from here too (tests)


def load_plan(path: str | Path) -> LaunchPlan:
    """Load and check a plan JSON file; the ``LaunchPlan`` ``plan`` returns."""
    return LaunchPlan.of(load_plan_file(path))
