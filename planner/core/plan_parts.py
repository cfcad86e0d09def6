"""Typed parts of a plan: the model, the parallel layout, the microbatches and the partition.

Each part is a frozen dataclass with one ``from_dict``/``to_dict`` pair, the only place its
JSON keys are spelled (``planner/data/schemas/plan.schema.json``); readers use attributes.
Keys a part does not know are kept in ``other`` and written back after the known ones, so a
plan read and written again keeps them. Modelled on torchtitan's config dataclasses
(``torchtitan/config/job_config.py``).

Each part is also a read-only ``Mapping`` over its JSON form (``part["pp"]``,
``part.get("ep", 1)``): the accessor of readers not yet moved to attributes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = ["ModelInfo", "Parallel", "Microbatches", "Stage", "stages_from_list", "partition_stages"]


class JsonView(Mapping):
    """A read-only Mapping over a part's JSON form (``to_dict``), for readers that still index
    plan sections by key; shared by the plan's parts and its records."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


class _Part(JsonView):
    """A plan part's JSON form as a read-only mapping (for readers by key)."""

    _KEYS: ClassVar[tuple[str, ...]] = ()
    """JSON keys the part owns, in the order they are written."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the known keys in order (None ones left out), then ``other``."""
        out = {k: _json(getattr(self, k)) for k in self._KEYS if getattr(self, k) is not None}
        out.update(self.other)  # type: ignore[attr-defined]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        """Build from the JSON form (already checked by the schema)."""
        if isinstance(data, cls):
            return data
        known = {k: data[k] for k in cls._KEYS if k in data}
        return cls(**cls._typed(known), other={k: v for k, v in data.items() if k not in cls._KEYS})

    @classmethod
    def _typed(cls, known: dict[str, Any]) -> dict[str, Any]:
        return known

def _json(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True, kw_only=True, eq=False)
class ModelInfo(_Part):
    """What model the plan is for (``planner.core.plan_sections.model_section``)."""

    _KEYS: ClassVar[tuple[str, ...]] = ("name", "num_layers", "layout", "layer_types")
    name: str
    """Shipped model id or config path."""
    num_layers: int
    """Layers, embedding and head included."""
    layout: str | None = None
    """One Megatron letter per layer: E (embedding), t/m (dense/MoE decoder), L (loss head)."""
    layer_types: tuple[str, ...] | None = None
    """Cost-table layer type of each layer."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this part does not know, kept as read."""

    @classmethod
    def _typed(cls, known: dict[str, Any]) -> dict[str, Any]:
        if known.get("layer_types") is not None:
            known["layer_types"] = tuple(known["layer_types"])
        return known


@dataclass(frozen=True, kw_only=True, eq=False)
class Parallel(_Part):
    """Parallel degrees and the stage placement (Megatron's ``--*-model-parallel-size`` flags)."""

    _KEYS: ClassVar[tuple[str, ...]] = ("tp", "ep", "dp", "cp", "etp", "pp", "vpp", "placement")
    pp: int
    """Pipeline-parallel ranks."""
    vpp: int = 1
    """Virtual stages per rank (stages = pp x vpp)."""
    tp: int = 1
    """Tensor-parallel degree."""
    ep: int = 1
    """Expert-parallel degree."""
    dp: int = 1
    """Data-parallel replicas."""
    cp: int | None = None
    """Context-parallel degree; None in plans that do not record it (1)."""
    etp: int | None = None
    """Expert tensor-parallel degree; None in plans that do not record it (``etp_size`` reads 1)."""
    placement: str | None = None
    """loop (stage s on rank s mod pp) or v (down then up); None in old plans (loop)."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this part does not know, kept as read."""

    @property
    def placement_style(self) -> str:
        """The placement, loop where the plan does not record one."""
        return self.placement or "loop"

    @property
    def cp_size(self) -> int:
        """Context-parallel degree, 1 where the plan does not record one."""
        return int(self.cp or 1)

    @property
    def etp_size(self) -> int:
        """Expert tensor-parallel degree as Megatron's flag reads it, 1 where the plan does not record one."""
        return int(self.etp or 1)


@dataclass(frozen=True, kw_only=True, eq=False)
class Microbatches(_Part):
    """Microbatches of one step."""

    _KEYS: ClassVar[tuple[str, ...]] = ("count", "size")
    count: int
    """Microbatches per step."""
    size: int
    """Sequences per microbatch."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this part does not know, kept as read."""


@dataclass(frozen=True, kw_only=True, eq=False)
class Stage(_Part):
    """One pipeline stage of the partition."""

    _KEYS: ClassVar[tuple[str, ...]] = ("stage", "rank", "layers", "device", "memory_limit_bytes")
    stage: int
    """Stage index, 0 .. pp x vpp - 1."""
    rank: int
    """Pipeline rank that runs it."""
    layers: tuple[int, int]
    """Layer range ``(start, end)``, end exclusive."""
    device: str | None = None
    """Mixed fleets: the GPU type of the stage's device group (``planner.core.devices``); None: the cluster's."""
    memory_limit_bytes: int | None = None
    """Mixed fleets: the per-GPU memory limit of that group; None: the plan's ``memory_limit_bytes``."""
    other: Mapping[str, Any] = field(default_factory=dict)
    """Keys this part does not know, kept as read."""

    @classmethod
    def _typed(cls, known: dict[str, Any]) -> dict[str, Any]:
        known["layers"] = tuple(known["layers"])
        return known


def partition_stages(bounds: Iterable[tuple[int, int]], ranks: Iterable[int], *,
                     devices: tuple[str, ...] = (), limits: tuple[int, ...] = ()) -> tuple[Stage, ...]:
    """The partition as stages: stage ``s`` holds layers ``bounds[s]`` on rank ``ranks[s]``;
    with a mixed fleet, ``devices[r]`` and ``limits[r]`` name each rank's group and its limit."""
    return tuple(Stage(stage=s, rank=r, layers=(a, b), device=devices[r] if devices else None,
                       memory_limit_bytes=limits[r] if limits else None)
                 for s, ((a, b), r) in enumerate(zip(bounds, ranks)))


def stages_from_list(items: Any) -> tuple[Stage, ...]:
    """The partition from its JSON list (``Stage`` members kept)."""
    return tuple(Stage.from_dict(s) for s in items)
