"""From a plan to what torch.distributed.pipelining runs: the plan's model at the replay's
width cut into stages, the pp x ep process layout of expert parallelism, and the checked
per-rank ``_Action`` lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from planner.core.errors import InputError
from planner.core.hf_config import load_model, resolve_model_path
from planner.core.model import ModelSpec
from planner.core.plan import Plan
from planner.core.recompute import is_module_set, modules_of
from planner.core.schedule import Action, Schedule
from planner.core.validate import render_violation, validate

__all__ = ["check_plan", "to_torch_actions", "flat_parts", "ReplayModel", "StageModule", "replay_model", "build_stage",
           "make_batch", "loss_fn", "Layout", "make_layout", "release_layout", "sync_gradients", "merge_ranks",
           "is_expert_param"]


# ---- actions ------------------------------------------------------------------------------------
# From a plan to what torch.distributed.pipelining runs: checks and ``_Action`` lists.
#
# The plan's per-rank order is handed to ``_PipelineScheduleRuntime`` as a compute-only
# schedule (F, I, W, B and ``OVERLAP_F_B`` pairs, exactly as planned); torch lowers it
# (``_add_send_recv``) and infers the stage-to-rank map from it (``_validate_schedule``).
# Before any process starts, the plan is checked here: world size, schedule validity
# (``planner.core.validate`` without the memory limit, which was set for another
# device) and the model it names.


def check_plan(plan: Plan, *, world_size: int) -> None:
    """Raise ``InputError`` when ``plan`` cannot be replayed on ``world_size`` processes."""
    if plan.pp != world_size:
        raise InputError("plan.parallel.pp", f"the plan has pp={plan.pp} but the replay runs "
                         f"{world_size} processes", f"launch exactly {plan.pp} ranks (torchrun "
                         f"--nproc-per-node {plan.pp}) or replay a plan made with --pp {world_size}")
    mode = plan.cluster.settings.recompute or "none"
    if is_module_set(mode):  # planner.runtime recomputes whole layers or mixers only
        raise InputError("plan.cluster.training.recompute", f"the plan recomputes Megatron's modules "
                         f"{', '.join(modules_of(mode))}, which the replay's layers cannot",
                         "replay a plan made with --recompute none, selective, full or op")
    schedule = plan.parsed_schedule()
    missing = [r for r in range(plan.pp) if not schedule.get(r)]
    if missing:
        raise InputError(f"plan.schedule.{missing[0]}", "rank has no actions",
                         "every pipeline rank needs its action list")
    violations = validate(schedule, plan.parsed_stage_costs(), num_microbatches=plan.num_microbatches)
    if violations:
        first = render_violation(violations[0], schedule).splitlines()[0]
        raise InputError("plan.schedule", f"fails validation: {first}",
                         "re-run ppplan plan, or fix the order and check it with ppplan validate")


def to_torch_actions(schedule: Schedule) -> dict[int, list[Any]]:
    """The plan's order as torch ``_Action`` lists (same text form, parsed by torch)."""
    from torch.distributed.pipelining.schedules import _Action

    return {rank: [_Action.from_str(str(a)) for a in acts] for rank, acts in sorted(schedule.items())}


def flat_parts(actions: list[Action]) -> list[tuple[int, int, str, int]]:
    """(action position, stage, kind, microbatch) of every plain part, in execution order.

    This is the order in which the runtime calls the stage's compute methods, so the
    k-th timed span of a rank belongs to the k-th entry here.
    """
    return [(pos, p.stage, p.kind, p.microbatch) for pos, a in enumerate(actions) for p in a.parts]


# ---- model and stages ---------------------------------------------------------------------------
# The model a replay runs: the plan's model at a reduced width, cut into stages.
#
# Layers come from the measured profiler's modules (``profiler.layers.build_layer``, or
# with ``modules="transformers"`` the model family's own transformers classes,
# ``profiler.hf.build_hf_layer``), built from one seed so that a stage built on any rank
# and the single-process reference hold the same numbers. A stage is its layers in order, named
# ``layers.<global index>`` so gradients can be compared by name across ranks.


@dataclass(frozen=True, kw_only=True)
class ReplayModel:
    """What every rank needs to build its stages and its data identically."""

    spec: ModelSpec
    """The model at the replay width (``scaled_model`` of the plan's model)."""
    scale: float
    """Width factor relative to the plan's model."""
    seq_len: int
    """Tokens per sequence."""
    microbatch_size: int
    """Sequences per microbatch."""
    microbatches: int
    """Microbatches per step."""
    seed: int = 0
    """Seed of the weights and of the token data."""
    ep: int = 1
    """Expert-parallel size: ranks of one stage, each with its own data (EP is carved out
    of data parallelism, as in Megatron) and ``experts / ep`` of each MoE layer's experts."""
    moe_capacity: Any = None
    """Megatron's capacity mode of the MoE layers (``profiler.layers.moe_capacity.CapacityMode``);
    None = dropless."""
    modules: str = "native"
    """Where the layers come from: native (``profiler.layers``) or transformers (``profiler.hf``)."""
    raw_config: dict[str, Any] | None = None
    """The model's parsed config.json (read by transformers modules)."""


def replay_model(plan: Plan, *, scale: float, seq_len: int, seed: int = 0, ep: int = 1,
                 moe_capacity: Any = None, modules: str = "native") -> ReplayModel:
    """Load the plan's model, check its layer count, EP and module source, and scale its width."""
    from profiler.layers import scaled_model

    spec = load_model(str(plan.model["name"]))
    if spec.num_layers != int(plan.model["num_layers"]):
        raise InputError("plan.model.num_layers", f"is {plan.model['num_layers']} but model "
                         f"{spec.name} has {spec.num_layers} layers", "re-plan this model")
    small = scaled_model(spec, scale)
    if ep > 1 and small.moe is not None and small.moe.num_experts % ep:
        raise InputError("--ep", f"{ep} does not divide the {small.moe.num_experts} experts of "
                         f"{spec.name} at scale {scale:g}", "pick an --ep that divides the expert count")
    raw = None
    if modules != "native":
        from profiler.hf import check_source
        from profiler.hf.config import raw_config

        raw = raw_config(spec, resolve_model_path(str(plan.model["name"])))
        check_source(spec, raw, modules=modules, capacity=moe_capacity)
    return ReplayModel(spec=small, scale=scale, seq_len=seq_len,
                       microbatch_size=int(plan.microbatches.get("size", 1)),
                       microbatches=plan.num_microbatches, seed=seed, ep=ep, moe_capacity=moe_capacity,
                       modules=modules, raw_config=raw)


class StageModule(nn.Module):
    """Layers ``[start, end)`` of the model, applied in order."""

    def __init__(self, layers: dict[int, nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleDict({str(k): m for k, m in sorted(layers.items())})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers.values():
            x = layer(x)
        return x


def build_stage(rm: ReplayModel, start: int, end: int, device: torch.device, *,
                ep_group: Any = None) -> StageModule:
    """The stage holding layers ``[start, end)`` on ``device`` (FP32, seeded); MoE layers
    exchange tokens over ``ep_group`` (a process group, or a callable ``layer index ->
    EmulatedLink``), else keep every expert local."""
    from profiler.hf import build_hf_layer
    from profiler.layers import build_layer

    def group(k: int) -> Any:
        return ep_group(k) if callable(ep_group) else ep_group

    def layer(k: int) -> nn.Module:
        if rm.modules == "transformers":
            return build_hf_layer(rm.spec, rm.spec.layers[k], raw=rm.raw_config, seed=rm.seed, ep_group=group(k))
        return build_layer(rm.spec, rm.spec.layers[k], seed=rm.seed, ep_group=group(k),
                           moe_capacity=rm.moe_capacity)

    layers = {k: layer(k) for k in range(start, end)}
    return StageModule(layers).to(device)


def make_batch(rm: ReplayModel, device: torch.device, *, ep_rank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids, targets), each ``[microbatches x microbatch_size, seq_len]``, from the seed
    (each expert-parallel rank draws its own batch)."""
    gen = torch.Generator().manual_seed(rm.seed + 1 + 7919 * ep_rank)
    shape = (rm.microbatches * rm.microbatch_size, rm.seq_len)
    ids = torch.randint(0, rm.spec.vocab, shape, generator=gen)
    target = torch.randint(0, rm.spec.vocab, shape, generator=gen)
    return ids.to(device), target.to(device)


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the head's logits (the profiler's definition)."""
    from profiler.layers import loss_fn as layers_loss

    return layers_loss(logits, target)


# ---- expert-parallel layout ---------------------------------------------------------------------
# Expert parallelism in a replay: pp x ep processes laid out as Megatron lays them out.
#
# Global rank = pp_rank x ep + ep_rank (Megatron's default order ``tp-cp-ep-dp-pp``: EP
# varies faster than PP; megatron/core/parallel_state.py). The ``ep`` ranks of one
# pipeline stage form its expert-parallel group: each holds ``experts / ep`` of every
# MoE layer's experts and its own batch (EP is carved out of data parallelism), and
# MoE layers send tokens to the other ranks' experts with real all-to-alls. The ranks
# with one EP index form a pipeline group that runs the plan's schedule.
#
# Gradients: after the gradient-check step, non-expert gradients are averaged over the
# EP group (the data-parallel all-reduce) and expert gradients divided by ``ep``
# (they already sum every rank's tokens through the all-to-all backward), which is the
# mean over the ``ep`` batches the single-process reference computes. Each token's
# activations and input gradients are the reference's to the last bit (experts run each
# source rank's rows apart: [Note: one GEMM per source rank] in ``profiler.layers.moe``);
# only the weight gradients' sums over ranks and microbatches add in another order.
# Timed steps do not all-reduce (the plan does not time data-parallel gradient sync).
# Timings and spans are reported for the pipeline group of EP index 0.


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Where this process sits in the pp x ep grid, and its groups."""

    pp: int
    """Pipeline ranks."""
    ep: int
    """Expert-parallel ranks per stage."""
    rank: int
    """Global rank."""
    pp_group: Any
    """This rank's pipeline group (WORLD when ep == 1)."""
    ep_group: Any
    """This rank's expert-parallel group (None when ep == 1)."""

    @property
    def pp_rank(self) -> int:
        return self.rank // self.ep

    @property
    def ep_rank(self) -> int:
        return self.rank % self.ep


def make_layout(pp: int, ep: int, rank: int) -> Layout:
    """Create every pipeline and expert-parallel group (all ranks call this, same order)."""
    if ep == 1:
        return Layout(pp=pp, ep=1, rank=rank, pp_group=dist.group.WORLD, ep_group=None)
    pp_groups = [dist.new_group([p * ep + e for p in range(pp)]) for e in range(ep)]
    ep_groups = [dist.new_group([p * ep + e for e in range(ep)]) for p in range(pp)]
    return Layout(pp=pp, ep=ep, rank=rank, pp_group=pp_groups[rank % ep], ep_group=ep_groups[rank // ep])


def release_layout(layout: Layout) -> None:
    """Destroy the groups ``make_layout`` made for this rank (none when ep == 1), leaving the
    default group alive."""
    if layout.ep > 1:
        dist.destroy_process_group(layout.ep_group)
        dist.destroy_process_group(layout.pp_group)


def is_expert_param(name: str) -> bool:
    """Routed-expert weights (held in slices across the EP group)."""
    return any(k in name for k in (".moe.w_gate_up", ".moe.w_down",  # native, then transformers'
                                    ".experts.gate_up_proj", ".experts.down_proj"))


def sync_gradients(mods: list, layout: Layout) -> None:
    """Mean over the EP group's batches (see the module doc); no-op when ep == 1."""
    if layout.ep == 1:
        return
    for m in mods:
        for name, p in m.named_parameters():
            if p.grad is None:
                continue
            if not is_expert_param(name):
                dist.all_reduce(p.grad, group=layout.ep_group)
            p.grad /= layout.ep


def merge_ranks(gathered: list[list[dict[str, Any]]], ep: int) -> list[list[dict[str, Any]]]:
    """Per pipeline rank, the EP-index-0 record with its rank set to the pipeline rank, the
    losses of every EP rank (in EP order) and the full expert gradients (slices joined)."""
    if ep == 1:
        return gathered
    out = []
    for p in range(len(gathered) // ep):
        group = gathered[p * ep:(p + 1) * ep]
        plans = []
        for j, rec in enumerate(group[0]):
            grads = dict(rec["grads"])
            for name in grads:
                if is_expert_param(name):
                    grads[name] = torch.cat([g[j]["grads"][name] for g in group])
            losses = [x for g in group for x in g[j]["losses"]]
            plans.append({**rec, "rank": p, "grads": grads, "losses": losses})
        out.append(plans)
    return out
