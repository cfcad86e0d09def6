"""Mixed GPU fleets: device groups and the pipeline ranks each group runs.

A fleet is an ordered list of groups, each one GPU type (a ``planner.core.hardware``
preset, optionally with less memory, e.g. 40 GB A100s) with its own node size and links.
``--devices h100:16,a100:32:40`` (type:count[:memGiB]) or ``devices:`` in a cluster file.

[Note: device mapping] Every pipeline rank has the same tp x cp x dp GPUs (its width; ep
and etp are carved out of them as without groups), and a group holds a whole number of
ranks: its count must be a multiple of the width. Pipeline ranks are given to the groups
in the order they are listed (rank 0, the embedding, on the first group), so each stage
runs on one group and its ranks are contiguous; with virtual stages a stage runs where its
rank is. This is the mapping Hetu-v2 and Metis restrict themselves to for uneven
pipelines (one GPU type per stage, same degrees per stage); uneven tp/dp per stage is not
modelled. A link between two groups is taken to cross nodes: the slower side's network
bandwidth, the larger latency (``cross_group_link``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from planner.core.costs import CostTable, P2PCost
from planner.core.errors import InputError
from planner.core.hardware import GPU_PRESETS, GpuSpec
from planner.core.limits import MAX_GPUS

__all__ = ["DeviceGroup", "parse_devices", "devices_from_config", "rank_groups", "cross_group_link", "fleet_table",
           "mean_peak", "DEVICE_ORDERS"]

DEVICE_ORDERS = ("given", "search")
"""``--devices-order``: pipeline ranks to the groups in the order listed, or each order tried
(the fastest kept; ``planner.planning.fleet.plan_device_orders``, ``planner.planning.choice``): the order decides which
group holds the embedding and the first stages, which hold the most microbatches in flight."""
_ITEM = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*):([0-9]+)(?::([0-9]*\.?[0-9]+))?$")
_FIELDS = ("type", "count", "memory_gib", "gpus_per_node", "nvlink_gbps", "network_gbps")


@dataclass(frozen=True, kw_only=True)
class DeviceGroup:
    """GPUs of one type in a mixed fleet (``[Note: device mapping]``)."""

    gpu: GpuSpec
    """The GPU: a preset, with this group's memory and links."""
    count: int
    """GPUs in the group."""
    gpus_per_node: int = 8
    """GPUs sharing NVLink in this group's nodes."""

    @property
    def name(self) -> str:
        """The type and, when it differs from the preset's, the memory (``a100-40g``)."""
        preset = GPU_PRESETS.get(self.gpu.name)
        if preset is not None and preset.memory_bytes != self.gpu.memory_bytes:
            return f"{self.gpu.name}-{self.gpu.memory_bytes / 2**30:g}g"
        return self.gpu.name


def _preset(name: str, where: str) -> GpuSpec:
    if name.lower() not in GPU_PRESETS:
        raise InputError(where, f"unknown GPU type {name!r}", f"use one of {', '.join(GPU_PRESETS)}")
    return GPU_PRESETS[name.lower()]


def _memory(gpu: GpuSpec, gib: float, where: str) -> GpuSpec:
    if not 0 < gib <= 4096:
        raise InputError(where, f"memory {gib:g} GiB is not in (0, 4096]", "give the GPU memory in GiB, e.g. 40")
    return replace(gpu, memory_bytes=gib * 2**30)


def parse_devices(text: str, *, field: str = "--devices") -> tuple[DeviceGroup, ...]:
    """``h100:16,a100:32:40`` (type:count[:memGiB], comma-separated) to device groups."""
    groups = []
    for k, item in enumerate(text.split(",")):
        m = _ITEM.match(item.strip())
        if not m:
            raise InputError(field, f"cannot read {item.strip()!r} (group {k + 1})",
                             "write type:count or type:count:memGiB, comma-separated, e.g. h100:16,a100:32:40")
        gpu = _preset(m.group(1), field)
        if not 1 <= int(m.group(2)) <= MAX_GPUS:
            raise InputError(field, f"group {k + 1} ({item.strip()}) needs 1 to {MAX_GPUS} GPUs", "give its GPU count")
        if m.group(3) is not None:
            gpu = _memory(gpu, float(m.group(3)), field)
        groups.append(DeviceGroup(gpu=gpu, count=int(m.group(2))))
    return _within_limit(tuple(groups), field)


def _within_limit(groups: tuple[DeviceGroup, ...], field: str) -> tuple[DeviceGroup, ...]:
    total = sum(g.count for g in groups)
    if total > MAX_GPUS:
        raise InputError(field, f"the groups hold {total} GPUs, more than {MAX_GPUS}", "give fewer GPUs")
    return groups


def devices_from_config(value: Any, *, where: str = "cluster.devices") -> tuple[DeviceGroup, ...]:
    """A cluster file's ``devices:`` list: ``{type, count, memory_gib?, gpus_per_node?,
    nvlink_gbps?, network_gbps?}`` per group (``cluster.schema.json``)."""
    if not isinstance(value, list) or not value:
        raise InputError(where, "expected a non-empty list of groups", "e.g. [{type: h100, count: 16}]")
    return _within_limit(tuple(_group(item, f"{where}[{k}]") for k, item in enumerate(value)), where)


def _group(item: Any, where: str) -> DeviceGroup:
    if not isinstance(item, dict):
        raise InputError(where, "expected a mapping", "e.g. {type: a100, count: 16, memory_gib: 40}")
    for key, v in item.items():
        if key not in _FIELDS:
            raise InputError(f"{where}.{key}", "unknown field", f"known fields: {', '.join(_FIELDS)}")
        if key != "type" and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0
                              or (key in ("count", "gpus_per_node") and not isinstance(v, int))):
            kind = "integer" if key in ("count", "gpus_per_node") else "number"
            raise InputError(f"{where}.{key}", f"expected a positive {kind}, got {v!r}")
    for key in ("type", "count"):
        if key not in item:
            raise InputError(f"{where}.{key}", "missing", "each group needs type and count")
    if not isinstance(item["type"], str):
        raise InputError(f"{where}.type", f"expected a GPU type name, got {item['type']!r}")
    gpu = _preset(item["type"], f"{where}.type")
    if "memory_gib" in item:
        gpu = _memory(gpu, float(item["memory_gib"]), f"{where}.memory_gib")
    links = {name: item[key] * 1e9 for key, name in (("nvlink_gbps", "nvlink_bandwidth"),
                                                     ("network_gbps", "ib_bandwidth")) if key in item}
    return DeviceGroup(gpu=replace(gpu, **links), count=item["count"], gpus_per_node=item.get("gpus_per_node", 8))


def rank_groups(groups: tuple[DeviceGroup, ...], width: int, *, field: str = "devices") -> tuple[int, ...]:
    """The group index of each pipeline rank: ``count / width`` ranks per group, in order
    (``[Note: device mapping]``); ``InputError`` when a count is not a multiple of ``width``."""
    out: list[int] = []
    for k, g in enumerate(groups):
        if g.count % width:
            raise InputError(field, f"group {k + 1} ({g.name}:{g.count}) is not a whole number of pipeline ranks "
                             f"of tp x cp x dp = {width} GPUs",
                             f"give each group a multiple of {width} GPUs, or change tp/dp (--dp, --tp)")
        out += [k] * (g.count // width)
    return tuple(out)


def mean_peak(groups: Sequence[tuple[int, float]]) -> float:
    """Peak FLOP/s per GPU over (count, peak) groups: every GPU at its own peak (the MFU denominator)."""
    return sum(n * peak for n, peak in groups) / sum(n for n, _ in groups)


def cross_group_link(a: GpuSpec, b: GpuSpec) -> P2PCost:
    """The pipeline link between ranks of two groups: across nodes, at the slower side's
    network bandwidth and the larger latency (``[Note: device mapping]``)."""
    return P2PCost(latency_s=max(a.p2p_latency_s, b.p2p_latency_s), bandwidth=min(a.ib_bandwidth, b.ib_bandwidth))


def fleet_table(tables: Sequence[CostTable], groups: tuple[DeviceGroup, ...], ranks: tuple[int, ...]) -> CostTable:
    """One cost table for a fleet: ``tables[k]`` is group k's (same model, degrees and mode),
    ``ranks[r]`` the group of pipeline rank r (``rank_groups``). The result is rank 0's table
    with every rank's (``CostTable.rank_tables``) and every neighbour link (``rank_links``:
    a group's own ``p2p`` inside it, ``cross_group_link`` between two)."""
    def same_bytes(t: CostTable) -> bool:
        return all((a.static_bytes, a.act_bytes, a.act_w_bytes, a.work_bytes, a.out_bytes)
                   == (b.static_bytes, b.act_bytes, b.act_w_bytes, b.work_bytes, b.out_bytes)
                   for a, b in zip(t.layers, tables[0].layers))
    if not all(same_bytes(t) for t in tables):  # the planner keeps one byte table for every group
        raise InputError("--devices", "the groups' GPUs need different bytes per layer for this model "
                         "(e.g. FP8 on one type only)", "plan each GPU type on its own, or use bf16")
    pp = len(ranks)
    links = tuple(tables[ranks[r]].p2p if ranks[r] == ranks[(r + 1) % pp]
                  else cross_group_link(groups[ranks[r]].gpu, groups[ranks[(r + 1) % pp]].gpu) for r in range(pp))
    first = tables[ranks[0]]
    return replace(first, rank_tables=tuple(tables[k] for k in ranks),
                   rank_links=() if all(link == first.p2p for link in links) else links)
