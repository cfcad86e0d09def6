"""Helpers shared by plan tests."""

from __future__ import annotations


def without_wall_s(data):
    """``data`` with every ``wall_s`` key dropped, at any depth (timings differ run to run)."""
    if isinstance(data, dict):
        return {k: without_wall_s(v) for k, v in data.items() if k != "wall_s"}
    if isinstance(data, list):
        return [without_wall_s(v) for v in data]
    return data
