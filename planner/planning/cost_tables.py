"""The cost tables one ``ppplan plan`` request plans with: analytical (one per recomputation
mode, one per device group on a mixed fleet) or the measured profile's one."""

from __future__ import annotations

from pathlib import Path

from planner.core.cluster import ClusterSpec
from planner.core.costs import CostTable
from planner.core.costs_io import load_costs_for
from planner.core.errors import InputError
from planner.core.model import ModelSpec
from planner.core.recompute import is_module_set, module_sets_in, modules_of
from planner.planning.fleet import fleet_costs

__all__ = ["plan_costs"]


def plan_costs(spec: ModelSpec, cl: ClusterSpec, profile: str | Path | None) -> list[tuple[str, CostTable]]:
    """(recompute mode, cost table) pairs to plan with: one per mode of ``cl`` (all three for
    ``recompute: auto``) from the analytical model, or the measured profile's one (its
    ``meta.recompute``, default none: ``ppplan profile`` measures without recomputation)."""
    if profile is None:
        from profiler.analytical import analytical_costs

        costs = fleet_costs if cl.devices else analytical_costs
        return [(mode, costs(spec, cl.with_recompute(mode))) for mode in cl.training.recompute_modes()]
    if cl.devices:
        raise InputError("--devices", "plans from the analytical model; a measured profile is of one GPU type",
                         "leave out --profile, or plan each group's profile on its own")
    table = load_costs_for(profile, spec, fix="profile the same model")
    mode = str(table.meta.get("recompute") or "none")
    if cl.training.recompute not in ("auto", mode):
        asked = cl.training.recompute
        if is_module_set(asked):  # Megatron's module lists: name them as the user gave them
            lists = " / ".join(",".join(modules_of(m)) for m in module_sets_in(asked))
            raise InputError("--recompute-modules", f"{lists} given but the profile was measured with recompute "
                             f"{mode}", f"drop --recompute-modules (or training.recompute's list), or re-profile")
        raise InputError("--recompute", f"{asked} given but the profile was measured with {mode}",
                         f"pass --recompute {mode} or re-profile")
    return [(mode, table.at_microbatch_size(cl.training.micro_batch_size))]
