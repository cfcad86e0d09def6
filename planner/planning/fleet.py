"""Planning on a mixed fleet (``--devices``): one cost table per device group, one memory limit per rank.

The front door calls these when the cluster has device groups (``planner.core.devices``);
everything after them (screen, joint search, polish, validation) is the one planning path,
reading each stage's times from its rank's table (``CostTable.for_rank``) and each rank's
limit from ``PlanRequest.rank_memory_bytes``.
"""

from __future__ import annotations

from planner.core.cluster import ClusterSpec
from planner.core.costs import CostTable
from planner.core.devices import fleet_table, rank_groups
from planner.core.model import ModelSpec

__all__ = ["fleet_costs", "fleet_request"]


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
