"""Typed records of a plan: the prediction (``predicted``), the solver record (``solver``),
the cluster and training section (``cluster``) and the baselines (``baselines``).

Unlike the layout parts (``planner.core.plan_parts``) these sections grow as the planner
runs (the front door adds the optimizer step, the polish its schedule solver, the degree
search its table), so each record remembers the order its JSON keys were first written in
(``order``): a plan read and written again, or extended with ``dataclasses.replace``, writes
its keys in the same order, byte for byte. A key read as ``null`` stays ``null``.
Nested free-form records (``refine``, ``candidates``, ``budget``, ``degrees`` ...) stay JSON
values inside the typed envelope. Schema: ``planner/data/schemas/plan.schema.json``.

Each record is also a read-only ``Mapping`` over its JSON form (``rec["step_time_s"]``) for
readers outside ppplan that index the JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from planner.core.devices import mean_peak
from planner.core.plan_parts import JsonView

__all__ = ["Predicted", "SolverRecord", "ClusterInfo", "GpuInfo", "TrainingInfo", "Baseline", "baselines_from_dict"]

_TUPLES: frozenset[str] = frozenset({"peak_memory_bytes", "busy_s", "critical_path"})
"""List-valued fields held as tuples (records are frozen)."""


class _Record(JsonView):
    """A growing plan section: typed fields, unknown keys in ``other``, key order in ``order``."""

    _ALWAYS: ClassVar[tuple[str, ...]] = ()
    """Fields a record built in code writes even when None (those ``to_plan`` writes)."""
    _NESTED: ClassVar[tuple[tuple[str, type], ...]] = ()
    """(field, record type) of fields that are records themselves, converted from JSON objects."""

    def __post_init__(self) -> None:
        for name, kind in self._NESTED:
            value = getattr(self, name)
            if isinstance(value, Mapping) and not isinstance(value, kind):
                object.__setattr__(self, name, kind.from_dict(value))  # type: ignore[attr-defined]
        known = self._known()
        fresh = self.order is None  # type: ignore[attr-defined]
        order = list(self.order or ())  # type: ignore[attr-defined]
        for name in known:
            if name not in order and (getattr(self, name) is not None or (fresh and name in self._ALWAYS)):
                order.append(name)
            if name in _TUPLES and isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        order += [k for k in self.other if k not in order]  # type: ignore[attr-defined]
        object.__setattr__(self, "order", tuple(order))

    @classmethod
    def _known(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in ("other", "order"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        """Build from the JSON form (already checked by the schema), keeping its key order."""
        if isinstance(data, cls):
            return data
        known = set(cls._known())
        return cls(**{k: v for k, v in data.items() if k in known}, order=tuple(data),
                   other={k: v for k, v in data.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        """JSON form, keys in the order they were first written."""
        known = set(self._known())
        out = {}
        for k in self.order:  # type: ignore[attr-defined]
            if k in known:
                v = getattr(self, k)
                out[k] = list(v) if isinstance(v, tuple) else v.to_dict() if isinstance(v, _Record) else v
            elif k in self.other:  # type: ignore[attr-defined]
                out[k] = self.other[k]  # type: ignore[attr-defined]
        return out

    def with_other(self, **extra: Any) -> Any:
        """A copy with ``extra`` set among the keys this record does not type."""
        return replace(self, other={**self.other, **extra})  # type: ignore[attr-defined]

    def without(self, *keys: str) -> Any:
        """A copy with ``keys`` left out (as if never written)."""
        known = set(self._known())
        drop = {k: None for k in keys if k in known}
        return replace(self, **drop, order=tuple(k for k in self.order if k not in keys),  # type: ignore[attr-defined]
                       other={k: v for k, v in self.other.items() if k not in keys})  # type: ignore[attr-defined]

@dataclass(frozen=True, kw_only=True, eq=False)
class Predicted(_Record):
    """The plan's predicted step (``planner.planning.assembly.to_plan`` and
    ``planner.planning.dp_step.add_dp_step``, [Note: one step] in ``planner.planning.prediction``)."""

    _ALWAYS: ClassVar[tuple[str, ...]] = (
        "step_time_s", "bubble_fraction", "mfu", "peak_memory_bytes", "memory_limit_bytes", "lower_bound_s",
        "lower_bound_terms", "lower_bound_binds", "lower_bound_memory_limited", "steady_step_time_s",
        "steady_bubble_fraction", "busy_s", "critical_path")
    step_time_s: float | None = None
    """Simulated pipeline schedule, first forward to last backward, seconds."""
    bubble_fraction: float | None = None
    """Idle share of the ranks' time in the simulated schedule."""
    mfu: float | None = None
    """Model FLOPs utilisation over the whole optimizer step (PaLM convention)."""
    peak_memory_bytes: tuple[int, ...] | None = None
    """Peak memory of each pipeline rank, bytes."""
    memory_limit_bytes: int | None = None
    """Per-GPU memory limit the plan was made for; None when unlimited."""
    lower_bound_s: float | None = None
    """Step-time lower bound (``solvers.schedule.search.lower_bound``)."""
    lower_bound_terms: Mapping[str, float] | None = None
    """Each term of the bound by name."""
    lower_bound_binds: str | None = None
    """The term that binds."""
    lower_bound_memory_limited: bool | None = None
    """Whether the memory-limited term was counted."""
    steady_step_time_s: float | None = None
    """Step time of the steady state (``planner.core.steady``)."""
    steady_bubble_fraction: float | None = None
    """Bubble of the steady state."""
    busy_s: tuple[float, ...] | None = None
    """Busy time of each rank, seconds."""
    critical_path: tuple[str, ...] | None = None
    """First actions of the critical path, ``rank:action``."""
    dp_exposed_s: float | None = None
    """Data-parallel traffic not hidden behind compute, seconds."""
    optimizer_s: float | None = None
    """Adam step, seconds."""
    optimizer_step_time_s: float | None = None
    """``step_time_s + dp_exposed_s + optimizer_s``."""
    tokens_per_s_per_gpu: float | None = None
    """Global batch tokens / optimizer step / GPUs."""
    memory_limit: str | None = None
    """The memory limit as the user gave it, when it caps in-flight microbatches."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this record does not know, kept as read."""
    order: tuple[str, ...] | None = field(default=None, repr=False)
    """JSON keys in the order first written (None: built in code, field order)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class SolverRecord(_Record):
    """What the planner ran and tried (``planner.planning.make_plan``)."""

    _ALWAYS: ClassVar[tuple[str, ...]] = (
        "name", "status", "wall_s", "gap", "seed", "partition", "schedule", "estimate_s", "objective",
        "microbatch_search", "refine", "pins", "candidates")
    name: str | None = None
    """Partition solver + simulator + schedule, e.g. ``dp+sim+1f1b-overlap``."""
    status: str | None = None
    """Partition solver status (OPTIMAL, FEASIBLE, HEURISTIC ...)."""
    wall_s: float | None = None
    """Wall-clock seconds of the search (the one field not reproducible)."""
    gap: float | None = None
    """Partition solver's optimality gap; None when it reports none."""
    seed: int | None = None
    """Seed of the search."""
    partition: str | None = None
    """Partition method."""
    schedule: str | None = None
    """Schedule of the plan."""
    estimate_s: float | None = None
    """Partition solver's step estimate, seconds."""
    objective: str | None = None
    """makespan or steady."""
    microbatch_search: bool | None = None
    """Whether the microbatch count was searched."""
    refine: Mapping[str, Any] | None = None
    """Joint refinement record (rounds, evaluated, finalists ...)."""
    pins: Mapping[str, Any] | None = None
    """Pinned first/last stage sizes."""
    candidates: list[Any] | None = None
    """Every (microbatches, schedule, recompute) candidate tried, with its status."""
    budget: Mapping[str, Any] | None = None
    """Work budget record: work, time limit, cut phases, timed actions."""
    winner: str | None = None
    """Why the winner won."""
    schedule_solver: Mapping[str, Any] | None = None
    """The schedule polish: name, status, gap, lower bound, candidates."""
    degrees: Mapping[str, Any] | None = None
    """The degree search's table and reason (``--gpus``)."""
    target_runs: list[Any] | None = None
    """Runs planned for a framework target."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this record does not know, kept as read."""
    order: tuple[str, ...] | None = field(default=None, repr=False)
    """JSON keys in the order first written (None: built in code, field order)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class GpuInfo(_Record):
    """The accelerator a plan is for (``planner.core.hardware``'s preset, as the plan records it)."""

    name: str | None = None
    """Preset name, e.g. h100."""
    peak_flops: float | None = None
    """Dense BF16 peak, FLOP/s: MFU's denominator."""
    memory_bytes: int | None = None
    """HBM per GPU, bytes."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Bandwidths and the rest, kept as read."""
    order: tuple[str, ...] | None = field(default=None, repr=False)
    """JSON keys in the order first written (None: built in code, field order)."""


@dataclass(frozen=True, kw_only=True, eq=False)
class TrainingInfo(_Record):
    """The training settings a plan is for (``planner.core.cluster.TrainingSpec``, as recorded)."""

    global_batch: int | None = None
    """Sequences per step."""
    seq_len: int | None = None
    """Tokens per sequence."""
    micro_batch_size: int | None = None
    """Sequences per microbatch."""
    precision: str | None = None
    """bf16, fp16 or fp8."""
    recompute: str | None = None
    """Activation recomputation the plan was made with: none, selective or full."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Kernels, optimizer sharding and the rest, kept as read."""
    order: tuple[str, ...] | None = field(default=None, repr=False)
    """JSON keys in the order first written (None: built in code, field order)."""


_NO_TRAINING = TrainingInfo()


@dataclass(frozen=True, kw_only=True, eq=False)
class ClusterInfo(_Record):
    """The cluster and training section (``planner.core.plan_sections.cluster_section``)."""

    _NESTED: ClassVar[tuple[tuple[str, type], ...]] = (("gpu", GpuInfo), ("training", TrainingInfo))
    gpu: GpuInfo | None = None
    """The accelerator."""
    num_gpus: int | None = None
    """GPUs in the job."""
    gpus_per_node: int | None = None
    """GPUs sharing NVLink."""
    training: TrainingInfo | None = None
    """Batch, sequence length, precision, recomputation."""
    network: Mapping[str, Any] | None = None
    """Dispatcher and link bandwidth overrides (``planner.core.network``)."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this record does not know, kept as read."""
    order: tuple[str, ...] | None = field(default=None, repr=False)
    """JSON keys in the order first written (None: built in code, field order)."""

    @property
    def settings(self) -> TrainingInfo:
        """The training section, an empty one where the plan records none."""
        return self.training if isinstance(self.training, TrainingInfo) else _NO_TRAINING

    @property
    def peak_flops(self) -> float | None:
        """The GPU's dense peak, None where the plan records none; on a mixed fleet (``devices``)
        the mean over its GPUs (``ClusterSpec.mean_peak_flops``)."""
        groups = self.other.get("devices")
        if isinstance(groups, list) and groups and all(isinstance(g, Mapping) and "peak_flops" in g for g in groups):
            return mean_peak([(g["count"], g["peak_flops"]) for g in groups])
        return self.gpu.peak_flops if isinstance(self.gpu, GpuInfo) else None


@dataclass(frozen=True, kw_only=True, eq=False)
class Baseline(_Record):
    """One baseline partition under the plan's schedule (``planner.planning.assembly.baselines_section``),
    or a whole plan of another partition (``--layout``: ``planner.planning.user_layout``)."""

    step_time_s: float | None = None
    """Simulated step, seconds; None when it was not run (``status`` says why)."""
    status: str | None = None
    """Why there is no step time: infeasible, skipped (time limit); plans written before the baselines
    ran regardless of the work budget may also say skipped (work budget spent)."""
    stages: list[list[int]] | None = None
    """Layer range of each stage."""
    schedule: str | None = None
    """Schedule it was simulated with."""
    microbatches: int | None = None
    """Microbatches per step."""
    peak_memory_bytes: tuple[int, ...] | None = None
    """Peak memory of each rank, bytes."""
    fits_memory: bool | None = None
    """Whether it stays within the memory limit."""
    plan_speedup: float | None = None
    """Its step time over the plan's."""
    bubble_fraction: float | None = None
    """Idle share of the ranks' time (the ``user_layout`` and ``ppplan`` baselines of ``--layout``)."""
    recompute: str | None = None
    """Recomputation mode it was planned with, where it may differ from the plan's (``--layout``)."""
    layout: str | None = None
    """The ``--layout`` text it was given as (``user_layout``; ``planner.planning.user_layout``)."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this record does not know, kept as read."""
    order: tuple[str, ...] | None = field(default=None, repr=False)
    """JSON keys in the order first written (None: built in code, field order)."""


def baselines_from_dict(data: Mapping[str, Any]) -> dict[str, Baseline]:
    """The baselines section, name -> ``Baseline`` (members already typed kept)."""
    return {name: b if isinstance(b, Baseline) else Baseline.from_dict(b) for name, b in data.items()}
