"""What each training framework executes, as data: the ``--target`` capability table.

One ``Target`` per framework says which schedules, placements, virtual-stage counts,
recomputation modes and MTP placements that framework runs, read from its own source
(files listed at ``TARGETS``; torch 2.13, Megatron-Core 0.16 / Megatron-LM main, torchtitan
0.3.0, DeepSpeed 0.19.8). The planner's search consumes it as a filter on what it
enumerates (``planner.api.plan``: families, pair costs, recomputation modes); the
exporters refuse, in one line naming the ``--target`` to re-plan with, any plan a
format cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.cluster import CP_COMM_TYPES, TORCH_RING
from planner.core.errors import InputError
from planner.core.recompute import is_module_set
from planner.core.op_sac import OP

__all__ = ["Target", "TARGETS", "TARGET_NAMES", "DEFAULT_TARGET", "get_target", "target_of", "target_for_format"]


@dataclass(frozen=True, kw_only=True)
class Target:
    """What one framework executes."""

    name: str
    """``--target`` value."""
    export_format: str
    """``ppplan export --format`` that writes its input."""
    other_formats: tuple[str, ...] = ()
    """Further export formats that write its input (Megatron-Bridge's overrides run Megatron-Core)."""
    families: tuple[str, ...] | None
    """Schedule families it runs (``solvers.schedule.families.registry``); None = every family."""
    any_order: bool
    """Whether it runs any valid per-rank order (a CSV runtime): W moved into bubbles,
    greedy and CP-SAT orders. False = only the families' orders exactly as drawn."""
    fused_pairs: bool
    """Whether it runs F and B of different microbatches overlapped (OVERLAP_F_B)."""
    fused_needs_vpp: bool = False
    """Fused pairs only with virtual stages when pp > 1 (Megatron's combined 1F1B)."""
    fused_needs_ep: bool = False
    """Fused pairs only with expert parallelism (Megatron's EP A2A overlap)."""
    fused_recompute: tuple[str, ...] = ("none", "selective", "full")
    """Recomputation modes that fused pairs run with."""
    placements: tuple[str, ...] = ("loop", "v")
    """Stage placements it builds."""
    max_vpp: int | None = None
    """Most stages per rank (None = any)."""
    recompute: tuple[str, ...] = ("none", "selective", "full")
    """Recomputation modes it has a switch for."""
    module_sets: bool = False
    """Whether it takes Megatron's recompute module lists (``planner.core.recompute``)."""
    mtp: str = "any"
    """Where MTP layers may sit: ``any``, ``last-chunk`` (one stage, the rank's last
    virtual chunk) or ``none`` (the framework's models have no MTP module)."""
    min_pp: int = 1
    """Fewest pipeline ranks it builds stages for."""
    moe_capacity: bool = True
    """Whether it runs Megatron's MoE capacity mode (``training.moe_expert_capacity_factor``):
    Megatron's own flags; torch through ``ppplan replay``'s layers (``profiler.layers.moe_capacity``)."""
    offload: bool = False
    """Whether it offloads activations (``training.offload``): Megatron-Core's ``--cpu-offloading`` and
    ``--fine-grained-activation-offloading`` (megatron/core/transformer/transformer_config.py); torchtitan
    0.3.0 offloads FSDP state only (``enable_cpu_offload``, torchtitan/config/configs.py), activations
    only in its experimental graph trainer; ppplan's torch runtime and the DeepSpeed export name none."""

    cp_comm_types: tuple[str, ...] = CP_COMM_TYPES
    """``training.cp_comm_type`` values it runs: Megatron TE's ring (``p2p``: megatron/training/
    arguments.py ``--cp-comm-type``), torchtitan torch's ring (``torch_*``: torch
    ``context_parallel``); ``auto`` everywhere."""

    def runs_recompute(self, mode: str, *, fused: bool = False) -> bool:
        """Whether it runs recomputation ``mode`` (with fused pairs when ``fused``): a module set
        is Megatron's selective granularity, so it fuses wherever selective does."""
        if is_module_set(mode):
            return self.module_sets and (not fused or "selective" in self.fused_recompute)
        return mode in (self.fused_recompute if fused else self.recompute)


TARGETS: dict[str, Target] = {
    "torch": Target(name="torch", export_format="torch-csv", families=None, any_order=True,
                    fused_pairs=True, recompute=("none", "selective", "full", OP)),
    "megatron": Target(name="megatron", export_format="megatron", other_formats=("megatron-bridge",),
                       families=("1f1b", "interleaved", "1f1b-overlap", "interleaved-overlap"),
                       any_order=False, fused_pairs=True, fused_needs_vpp=True, fused_needs_ep=True,
                       fused_recompute=("none", "selective"), placements=("loop",), mtp="last-chunk",
                       module_sets=True, offload=True, cp_comm_types=("auto", "p2p")),
    "torchtitan": Target(name="torchtitan", export_format="torchtitan", families=None, any_order=True,
                         fused_pairs=False, mtp="none", min_pp=2, moe_capacity=False, recompute=("none", OP, "full"),
                         cp_comm_types=("auto", *TORCH_RING)),
    "deepspeed": Target(name="deepspeed", export_format="deepspeed", families=("1f1b",), any_order=False,
                        fused_pairs=False, placements=("loop",), max_vpp=1, recompute=("none", "full"),
                        moe_capacity=False),
}
"""Capabilities per ``--target``, each read from its framework's source:

- torch: ``torch/distributed/pipelining/schedules.py``: ``ScheduleGPipe``,
  ``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ``ScheduleInterleavedZeroBubble``,
  ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV`` and ``_PipelineScheduleRuntime``
  (``_load_csv``: any per-rank order and stage-to-rank map; ``register_custom_function``
  runs ``OVERLAP_F_B`` pairs, ppplan's runtime in ``planner/runtime/``). Recomputation is
  the user's ``torch.utils.checkpoint`` around the stage modules: every mode, torchtitan's
  per-op policy (``op``) through ``create_selective_checkpoint_contexts``.
- megatron: ``megatron/core/pipeline_parallel/schedules.py``
  (``get_forward_backward_func``: no pipelining, 1F1B without interleaving, interleaved
  1F1B with virtual stages; ``forward_backward_pipelining_with_interleaving`` switches to
  ``combined_1f1b_schedule_for_interleaved_pipelining`` under
  ``--overlap-moe-expert-parallel-comm``, and ``forward_backward_no_pipelining`` to
  ``combined_1f1b_schedule_for_no_pipelining``); W stays inside the backward step
  (``--delay-wgrad-compute`` only splits it inside a combined step); stage i runs on
  rank i % pp (``megatron/core/transformer/pipeline_parallel_layer_layout.py``), MTP in
  one stage in the last virtual chunk (``validate_layer_layout``);
  ``megatron/training/arguments.py``: ``--recompute-granularity full|selective``, and the
  EP overlap refuses full recomputation.
- torchtitan: ``torchtitan/distributed/pipeline_parallel.py``
  (``_build_pipeline_schedule``: a CSV loads ``_PipelineScheduleRuntime``, so any order
  of F, I, W and B runs, W moved included; ``_get_pp_rank_to_stage_indices_mapping``:
  "v" placement only for ZBVZeroBubble/DualPipeV, "loop" otherwise; no OVERLAP_F_B
  function is registered for the CSV runtime); ``torchtitan/distributed/
  activation_checkpoint.py``: ``SelectiveAC`` (per-op: every second matmul's output kept, which
  ppplan costs as ``op``, not Megatron's attention-core ``selective``; ``auto`` under this
  target so plans none and full, and ``--recompute op`` asks for it), ``FullAC``; the decoder
  (``torchtitan/models/common/decoder.py``) has ``tok_embeddings``, ``layers``,
  ``norm``, ``lm_head`` and no MTP module.
- deepspeed: ``deepspeed/runtime/pipe/engine.py`` (``_exec_schedule`` always builds
  ``schedule.TrainSchedule``, the 1F1B of ``deepspeed/runtime/pipe/schedule.py``;
  ``DualPipeVSchedule`` there is not wired into the engine); ``deepspeed/runtime/pipe/
  module.py``: one stage per pipeline rank, ``activation_checkpoint_interval`` recomputes
  whole layers (full recomputation), no selective mode.
"""

TARGET_NAMES = tuple(TARGETS)
DEFAULT_TARGET = "torch"


def get_target(name: str) -> Target:
    """The target called ``name``; ``InputError`` naming the choices otherwise."""
    if name not in TARGETS:
        raise InputError("--target", f"unknown target {name!r}", f"use one of {', '.join(TARGET_NAMES)}")
    return TARGETS[name]


def target_of(plan_dict_target: object) -> str:
    """The target recorded in a plan (``plan.extra['target']``); plans made before
    ``--target`` existed were made for torch."""
    return str(plan_dict_target) if plan_dict_target else DEFAULT_TARGET


def target_for_format(fmt: str) -> str | None:
    """The target whose plans export format ``fmt`` runs (``trace`` draws any plan: torch's)."""
    if fmt == "trace":
        return DEFAULT_TARGET
    return next((t.name for t in TARGETS.values() if fmt in (t.export_format, *t.other_formats)), None)
