"""Helpers shared by plan tests."""

from __future__ import annotations

from planner.core.plan import without_wall_s

__all__ = ["without_wall_s"]
