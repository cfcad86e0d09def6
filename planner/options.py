"""The options of one plan request, shared by ``ppplan plan`` and ``planner.api.plan``.

One record, one default per option: the CLI builds a ``PlanOptions`` from its flags (each
flag is the field name with ``-`` for ``_``), the Python API takes one and/or keyword
overrides checked by field name. Modelled on torchtitan's config dataclasses
(``torchtitan/config/job_config.py``: one typed tree, a docstring per field).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.core.recompute import parse_modules
from planner.core.targets import DEFAULT_TARGET
from solvers.schedule.search.budget import DEFAULT_WORK

__all__ = ["PlanOptions", "plan_options", "recompute_mode", "OPTION_NAMES", "DEFAULT_MODEL"]

DEFAULT_MODEL = "qwen3-next-80b-a3b"
"""The model a plan request plans when it names none (``ppplan plan`` with no MODEL)."""


@dataclass(frozen=True, kw_only=True)
class PlanOptions:
    """What to plan besides the model and the cluster file; None = the cluster's or the default."""

    pp: int | None = None
    """Pipeline-parallel ranks (``--pp``)."""
    vpp: int | None = None
    """Virtual stages per rank (``--vpp``)."""
    tp: int | None = None
    """Tensor-parallel degree (``--tp``)."""
    ep: int | None = None
    """Expert-parallel degree (``--ep``)."""
    dp: int | None = None
    """Data-parallel replicas; default GPUs / (pp x tp) (``--dp``)."""
    gpus: int | None = None
    """Choose every degree for this many GPUs first (``--gpus``; ``planner.planning.degree_plans``)."""
    gpu: str | None = None
    """GPU preset replacing the cluster's (``--gpu``; ``planner.core.hardware.GPU_PRESETS``)."""
    devices: str | None = None
    """A mixed fleet, ``h100:16,a100:32:40`` (type:count[:memGiB]; ``planner.core.devices``)."""
    devices_order: str = "given"
    """given (pipeline ranks to the groups in the order listed) or search (every order tried, the
    fastest kept; ``planner.planning.fleet.DEVICE_ORDERS``)."""
    sites: int | None = None
    """Sites the GPUs are split over (``--sites``; ``planner.core.sites``); default the cluster's."""
    inter_site_gbps: float | None = None
    """Inter-site bandwidth, Gb/s (``--inter-site-gbps``); default the cluster's."""
    inter_site_latency_ms: float | None = None
    """Inter-site latency, ms (``--inter-site-latency-ms``); default the cluster's."""
    global_batch: int | None = None
    """Sequences per step (``--global-batch``)."""
    seq_len: int | None = None
    """Tokens per sequence (``--seq-len``)."""
    recompute: str | None = None
    """auto, none, selective or full; default the cluster's (``--recompute``)."""
    recompute_modules: str | tuple[str, ...] | None = None
    """Megatron's recompute modules, comma separated (``--recompute-modules moe_act,layernorm``):
    plan with that module set (``planner.core.recompute``) instead of ``recompute``; several
    lists (the option repeated): plan with each, keep the fastest that fits."""
    offload: str | tuple[str, ...] | None = None
    """Activation offloading (``--offload``): none, a number of layers (Megatron's
    ``--cpu-offloading-num-layers``) or Megatron's ``--offload-modules``, comma separated;
    several (the option repeated): plan with each, keep the fastest that fits; default the
    cluster's ``training.offload`` (``planner.core.offload``)."""
    microbatches: int | str | None = None
    """Microbatches per step, or ``"auto"`` to try every count dividing the per-replica batch."""
    memory_gib: float | None = None
    """Per-GPU memory limit in GiB; default GPU memory minus headroom (``--memory-gib``)."""
    memory_limit: str | None = None
    """Bytes per GPU (``80GiB``) or microbatches of activations (``4mb``), instead of ``memory_gib``
    (``solvers.schedule.engines.memory_limit.parse_memory_limit``)."""
    partition: str = "overlap"
    """Stage boundaries: overlap, serial, flops or uniform (``solvers.partition.search.METHODS``)."""
    first_stage_layers: int | None = None
    """Decoder layers pinned on the first stage (Megatron's ``--decoder-first-pipeline-num-layers``)."""
    last_stage_layers: int | None = None
    """Decoder layers pinned on the last stage (Megatron's ``--decoder-last-pipeline-num-layers``)."""
    layout: str | None = None
    """The user's partition: a Megatron ``--pipeline-model-parallel-layout`` string or decoder counts
    per stage (``planner.core.layout_text``), planned beside the free plan (``planner.planning.user_layout``)."""
    keep_layout: bool = False
    """Write the plan of ``layout`` instead of the free plan (which becomes its ``ppplan`` baseline)."""
    schedule: str = "auto"
    """Schedule family or auto (``solvers.schedule.search.SCHEDULE_CHOICES``)."""
    deadline: tuple[str, ...] = ()
    """``TASK=SECONDS`` items: latest end of a task (``--deadline``, repeatable)."""
    placement: str = "loop"
    """Virtual stages on ranks: loop (interleaved) or v (ZB-V, DualPipeV)."""
    target: str = DEFAULT_TARGET
    """Framework that will run the plan (``planner.core.targets``); the plan records it."""
    profile: str | Path | None = None
    """Measured cost table (``ppplan profile``) instead of the analytical model."""
    seed: int = 0
    """Seed of the searching solvers: the same inputs and seed give the same plan."""
    work: float = DEFAULT_WORK
    """Search effort in reference seconds ([Note: work budget] in ``solvers.schedule.search.budget``)."""
    time_limit: float | None = None
    """Wall-clock safety cap in seconds; None = none ([Note: kept budget])."""
    objective: str = "makespan"
    """makespan (one step) or steady (the period of repeated steps, ``planner.core.steady``)."""


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(PlanOptions))
"""Every option's name, in declaration order."""


def plan_options(options: PlanOptions | None = None, overrides: dict[str, Any] | None = None) -> PlanOptions:
    """``options`` (default ``PlanOptions()``) with ``overrides`` applied; an unknown name is an
    ``InputError`` naming it and the known ones."""
    base = PlanOptions() if options is None else options
    if not isinstance(base, PlanOptions):
        raise InputError("options", f"expected a PlanOptions, got {type(base).__name__}",
                         "pass planner.options.PlanOptions(...) or keyword options")
    unknown = [k for k in overrides or {} if k not in OPTION_NAMES]
    if unknown:
        raise InputError(unknown[0], "is not a plan option", f"use one of {', '.join(OPTION_NAMES)}")
    changes = dict(overrides or {})
    if "deadline" in changes:
        changes["deadline"] = tuple(changes["deadline"] or ())
    return replace(base, **changes) if changes else base


def recompute_mode(options: PlanOptions) -> str | None:
    """The recomputation mode ``options`` ask for: the module set of ``recompute_modules`` (with
    ``recompute`` unset or selective, Megatron's granularity for a module list), else ``recompute``."""
    if not options.recompute_modules:
        return options.recompute
    if options.recompute not in (None, "selective"):
        raise InputError("--recompute-modules", f"given with --recompute {options.recompute}",
                         "drop --recompute (or pass selective, the granularity a module list runs with)")
    return parse_modules(options.recompute_modules, field="--recompute-modules")
