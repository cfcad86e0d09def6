"""Planning on a mixed fleet (``--devices``): one cost table per device group, one memory limit per rank.

The front door calls these when the cluster has device groups (``planner.core.devices``);
everything after them (screen, joint search, polish, validation) is the one planning path,
reading each stage's times from its rank's table (``CostTable.for_rank``) and each rank's
limit from ``PlanRequest.rank_memory_bytes``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import permutations
from typing import Any

from planner.core.cluster import ClusterSpec
from planner.core.costs import CostTable
from planner.core.devices import fleet_table, rank_groups
from planner.core.errors import InputError
from planner.core.model import ModelSpec

__all__ = ["fleet_costs", "fleet_request", "device_orders", "plan_device_orders"]

def fleet_costs(spec: ModelSpec, cl: ClusterSpec) -> CostTable:
    """The analytical cost table of ``cl``'s fleet: each group's GPU, node size and links
    (``ClusterSpec.for_group``), merged by ``planner.core.devices.fleet_table``."""
    from profiler.analytical import analytical_costs

    p = cl.parallel
    tables = [analytical_costs(spec, cl.for_group(g)) for g in cl.devices]
    return fleet_table(tables, cl.devices, rank_groups(cl.devices, p.tp * p.cp * p.dp))


def fleet_request(cl: ClusterSpec, limit_bytes: int | None) -> dict:
    """``PlanRequest`` fields of a fleet: the per-rank limits (each group's memory less
    headroom, under ``limit_bytes`` when the user gave one), the device names, and the
    GPU-weighted mean peak as the MFU denominator. Empty without groups."""
    if not cl.devices:
        return {}
    caps = cl.rank_memory_limits
    return {"memory_limit_bytes": limit_bytes if limit_bytes is not None else max(caps),
            "rank_memory_bytes": caps, "rank_devices": tuple(g.name for g in cl.rank_devices),
            "peak_flops": cl.mean_peak_flops}


def device_orders(text: str) -> list[str]:
    """The distinct orders of ``--devices`` groups, the given one first (``--devices-order search``)."""
    items = [item.strip() for item in text.split(",")]
    if len(items) > 4:
        raise InputError("--devices-order", f"search tries every order of the groups: {len(items)} groups "
                         "are too many", "give at most 4 groups, or --devices-order given")
    return list(dict.fromkeys(",".join(p) for p in permutations(items)))


def plan_device_orders(plan_one: Callable[[str], Any], text: str, objective: str) -> Any:
    """``plan_one(devices)`` for each order of the groups (``device_orders``); the fastest plan by
    ``objective`` (the given order on a tie), with every order's step under ``solver.device_orders``.
    Raises the given order's error when no order plans."""
    from planner.planning.choice import plan_fastest

    return plan_fastest(plan_one, device_orders(text), objective, key="devices", record="device_orders")
