"""Standby GPUs: which pipeline roles of a plan a spare GPU of another type can take.

A plan's pipeline ranks fall into role classes by what they hold: ``first`` (the embedding),
``last`` (the loss head, and MTP where the model has it), ``ends`` (both, rank 0 under V
placement), ``middle`` (decoder layers only). The ends carry the vocabulary-sized tables,
so they need the most memory; a smaller standby GPU may fit only middle ranks. A role fits
a standby GPU when the plan's predicted peak of its busiest rank is within the standby
GPU's memory limit (its memory x (1 - the plan's headroom), the cluster's own rule).
Swapping a spare in for a lost GPU keeps the old plan when every lost rank's role fits and
there are enough spares; a slower spare slows its stage by about the peak-FLOP ratio
(reported, not simulated), and a spare off the node of its pipeline peers reaches them
over the network instead of NVLink (not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.core.errors import InputError
from planner.core.hardware import GpuSpec, gpu_from_config
from planner.core.model import ModelSpec
from planner.core.plan import Plan
from planner.replanning.inputs import plan_cluster
from planner.replanning.search import layer_ranks

__all__ = ["RoleFit", "parse_standby", "role_of_ranks", "standby_fit"]


@dataclass(frozen=True, kw_only=True)
class RoleFit:
    """One role class of a plan on a standby GPU."""

    role: str
    """first, middle, last or ends."""
    ranks: tuple[int, ...]
    """Pipeline ranks of that role."""
    peak_bytes: int
    """Predicted peak of its busiest rank."""
    fits: bool
    """The peak is within the standby GPU's memory limit."""


def parse_standby(text: str) -> tuple[GpuSpec, int]:
    """``TYPE:COUNT`` (a GPU preset name and a positive count) to (GPU, count)."""
    name, _, count = text.rpartition(":")
    if not name or not count.isdigit() or int(count) < 1:
        raise InputError("--standby", f"{text!r} is not TYPE:COUNT", "pass e.g. h100:8 (a GPU preset and a count)")
    return gpu_from_config(name, where="--standby"), int(count)


def role_of_ranks(plan: Plan, model: ModelSpec) -> list[str]:
    """The role class of every pipeline rank (module doc)."""
    ranks = layer_ranks(plan.bounds(), plan.ranks())
    held: list[set[str]] = [set() for _ in range(plan.pp)]
    for layer in model.layers:
        held[ranks[layer.index]].add(layer.role)
    roles = []
    for h in held:
        first, last = "embedding" in h, "head" in h
        roles.append("ends" if first and last else "first" if first else "last" if last else "middle")
    return roles


def standby_fit(plan: Plan, model: ModelSpec, gpu: GpuSpec, count: int, *, lost: tuple[int, ...] = ()) -> dict:
    """Which roles of ``plan`` fit ``gpu``; with ``lost`` global ranks, whether ``count``
    spares of it replace them so the old plan runs unchanged."""
    cluster = plan_cluster(plan)
    limit = replace(cluster, gpu=gpu).memory_limit_bytes
    roles = role_of_ranks(plan, model)
    peaks = plan.predicted.peak_memory_bytes
    fits = []
    for role in ("first", "middle", "last", "ends"):
        ranks = tuple(r for r, x in enumerate(roles) if x == role)
        if ranks:
            peak = max(int(peaks[r]) for r in ranks)
            fits.append(RoleFit(role=role, ranks=ranks, peak_bytes=peak, fits=peak <= limit))
    group = cluster.num_gpus // plan.pp
    lost_roles = sorted({roles[g // group] for g in lost})
    fitting = {f.role for f in fits if f.fits}
    swap = bool(lost) and count >= len(lost) and set(lost_roles) <= fitting
    return {"gpu": gpu.name, "count": count, "memory_limit_bytes": limit,
            "compute_ratio": gpu.peak_flops / cluster.gpu.peak_flops,
            "roles": [{"role": f.role, "ranks": list(f.ranks), "peak_bytes": f.peak_bytes, "fits": f.fits}
                      for f in fits],
            "lost_roles": lost_roles, "swap_keeps_plan": swap}
