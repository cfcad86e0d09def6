"""The cost table: the contract between the profiler (which fills it) and the solvers.

All times are seconds for one microbatch of ``microbatch_size`` sequences of ``seq_len``
tokens on one GPU of the cluster (after tensor/expert parallel sharding); each field is
defined at ``LayerCost`` and ``CostTable``. ``pairs[(ta, tb)]`` is ``OV[a, b]``: F of a
layer of type ``ta`` beside the input-gradient of a layer of type ``tb`` (another
microbatch) with communication overlapped, after Megatron-LM's EP all-to-all overlap
(``--overlap-moe-expert-parallel-comm``: megatron/core/pipeline_parallel/combined_1f1b.py);
a missing pair means no overlap, ``OV = serial``. Memory: ``act_bytes`` is allocated at F;
the input-gradient frees ``act_bytes - act_w_bytes``, the weight-gradient ``act_w_bytes``.

[Note: full backward] ``b``, when measured, is one full backward (input and weight
gradients in one autograd pass); None means ``i + w``. A runtime that splits the backward
(torch.distributed.pipelining's ``stage_backward_input`` then ``stage_backward_weight``)
walks the autograd graph twice, so on torch the split costs more (measured in
docs/costs.md). A schedule with full backwards is timed with ``b``, one with the split
with ``i`` and ``w``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.core.p2p import SiteHop

__all__ = ["LayerCost", "CostTable", "CostFile", "P2PCost"]


@dataclass(frozen=True, kw_only=True)
class LayerCost:
    """Costs of one layer for one microbatch."""

    type: str
    """Layer type key; pair costs are looked up by type."""
    role: str = "decoder"
    """embedding, decoder, mtp or head (Megatron letters E, t, m, L)."""
    f: float
    """Forward compute, seconds."""
    i: float
    """Input-gradient compute, seconds."""
    w: float
    """Weight-gradient compute, seconds."""
    b: float | None = None
    """Full backward compute (one autograd pass), seconds; None: ``i + w`` ([Note: full backward])."""
    a2a_f: float = 0.0
    """Exposed all-to-all in forward (dispatch + combine) when the layer runs alone, seconds;
    0 for layers without experts."""
    a2a_b: float = 0.0
    """Exposed all-to-all in backward (gradients of combine and dispatch), seconds."""
    act_bytes: int = 0
    """Activation bytes kept from forward until backward, per microbatch."""
    act_w_bytes: int = 0
    """Part of ``act_bytes`` still held after the input-gradient, until the weight-gradient."""
    param_bytes: int = 0
    """Weight bytes on one GPU."""
    grad_bytes: int = 0
    """Gradient buffer bytes on one GPU."""
    optim_bytes: int = 0
    """Optimizer state bytes on one GPU (after distributed-optimizer sharding)."""
    work_bytes: int = 0
    """Transient bytes the layer allocates beyond its saved activations while one of its tasks
    runs, freed when it ends (the loss's gradient buffers in the output head; a fully
    recomputed layer's re-materialised activations). One layer runs at a time on a GPU, so a
    rank holds the largest of its layers' work bytes on top of its static and saved bytes."""
    out_bytes: int = 0
    """Bytes of the activation this layer hands to the next layer (the P2P message at a stage edge)."""
    flops: float = 0.0
    """Model FLOPs of forward + backward for one microbatch (for MFU; PaLM convention)."""
    imbalance: float = 1.0
    """Routing imbalance applied to this layer: busiest EP rank load / mean (1 = balanced)."""

    @property
    def serial_f(self) -> float:
        """Forward including its exposed all-to-all."""
        return self.f + self.a2a_f

    @property
    def serial_i(self) -> float:
        """Input-gradient including its exposed all-to-all."""
        return self.i + self.a2a_b

    @property
    def serial_b(self) -> float:
        """Full backward including its exposed all-to-all."""
        return (self.i + self.w if self.b is None else self.b) + self.a2a_b

    @property
    def static_bytes(self) -> int:
        """Parameters + gradients + optimizer state."""
        return self.param_bytes + self.grad_bytes + self.optim_bytes


@dataclass(frozen=True, kw_only=True)
class P2PCost:
    """Pipeline point-to-point link: time = latency + bytes / bandwidth."""

    latency_s: float = 10e-6
    """Per-message latency, seconds."""
    bandwidth: float = 50e9
    """Bytes per second, one direction."""

    def time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes``."""
        return self.latency_s + nbytes / self.bandwidth


@dataclass(frozen=True, kw_only=True)
class CostFile:
    """The file a cost table was read from, which a plan made from it records (its
    ``costs.profile``), so that ``ppplan replay`` can read the profile again."""

    path: str
    """The path as it was given (relative ones to the working directory of the time)."""
    sha256: str
    """Hex SHA-256 of the file's text (``planner.core.costs_io.file_sha256``)."""


@dataclass(frozen=True, kw_only=True)
class CostTable:
    """Per-layer and per-layer-pair costs of one model on one cluster configuration."""

    model: str
    """Model id the table describes."""
    source: str
    """analytical, measured or user."""
    layers: tuple[LayerCost, ...]
    """One entry per schedulable layer, in pipeline order."""
    pairs: dict[tuple[str, str], float] = field(default_factory=dict)
    """OV by (forward layer type, backward layer type), seconds."""
    p2p: P2PCost = field(default_factory=P2PCost)
    """Pipeline send/receive cost."""
    site_hop: "SiteHop | None" = None
    """Inter-site link of the pipeline boundaries between sites (``planner.core.p2p.SiteHop``,
    set by ``planner.planning.sites`` when pp crosses sites; never written to a table file)."""
    microbatch_size: int = 1
    """Sequences per microbatch the times are for."""
    seq_len: int = 0
    """Tokens per sequence."""
    size_curve: tuple[tuple[int, float], ...] = ((1, 1.0),)
    """(microbatch size, time of one microbatch relative to ``microbatch_size``): how per-microbatch
    efficiency changes with size; interpolated linearly, extrapolated proportionally."""
    device: str = ""
    """Where it was measured or which GPU preset it models."""
    scale: float = 1.0
    """Width scale of the measured modules (1 = full size)."""
    meta: dict[str, object] = field(default_factory=dict)
    """Free-form provenance (profiler settings, routing source, hidden shares)."""
    file: CostFile | None = field(default=None, compare=False)
    """Where the table was read from (None: made in memory); not part of its value, not saved."""
    rank_tables: tuple["CostTable", ...] = ()
    """Mixed fleets (``planner.core.devices``): the table of each pipeline rank's device group,
    same layers and bytes, its own times; empty: every rank runs on this table (``for_rank``)."""
    rank_links: tuple[P2PCost, ...] = ()
    """Mixed fleets: the link from pipeline rank r to rank r + 1 (mod pp); empty: ``p2p`` everywhere."""

    def for_rank(self, rank: int) -> "CostTable":
        """The table pipeline rank ``rank`` runs on: its group's, or this one."""
        return self.rank_tables[rank] if self.rank_tables else self

    def link(self, rank: int, to: int) -> P2PCost:
        """The pipeline link from ``rank`` to ``to`` (``rank_links`` between neighbours, else ``p2p``)."""
        if not self.rank_links or rank == to:
            return self.p2p
        lo, hi = (rank, to) if (rank + 1) % len(self.rank_links) == to else (to, rank)
        return self.rank_links[lo] if (lo + 1) % len(self.rank_links) == hi else self.p2p

    @property
    def num_layers(self) -> int:
        """Number of layers."""
        return len(self.layers)

    def ov(self, a: int, b: int) -> float:
        """OV[a, b]: F of layer a beside input-gradient backward of layer b (seconds)."""
        la, lb = self.layers[a], self.layers[b]
        key = (la.type, lb.type)
        if key in self.pairs:
            return self.pairs[key]
        return la.serial_f + lb.serial_i

    def serial_pair(self, a: int, b: int) -> float:
        """F of a then input-gradient of b, one after the other."""
        return self.layers[a].serial_f + self.layers[b].serial_i

    def time_factor(self, microbatch_size: int) -> float:
        """Time of one microbatch of ``microbatch_size`` relative to this table's size."""
        sizes = [s for s, _ in self.size_curve]
        vals = [v for _, v in self.size_curve]
        if microbatch_size in sizes:
            return vals[sizes.index(microbatch_size)]
        k = bisect.bisect_left(sizes, microbatch_size)
        if k == 0:
            return vals[0] * microbatch_size / sizes[0]
        if k == len(sizes):
            return vals[-1] * microbatch_size / sizes[-1]
        s0, s1, v0, v1 = sizes[k - 1], sizes[k], vals[k - 1], vals[k]
        return v0 + (v1 - v0) * (microbatch_size - s0) / (s1 - s0)

    def at_microbatch_size(self, microbatch_size: int) -> "CostTable":
        """The same table rescaled to another microbatch size (times by ``time_factor``,
        activation and message bytes and FLOPs proportionally)."""
        if microbatch_size == self.microbatch_size:
            return self
        t = self.time_factor(microbatch_size)
        r = microbatch_size / self.microbatch_size
        layers = tuple(replace(
            lc, f=lc.f * t, i=lc.i * t, w=lc.w * t, b=None if lc.b is None else lc.b * t, a2a_f=lc.a2a_f * r, a2a_b=lc.a2a_b * r,
            act_bytes=int(lc.act_bytes * r), act_w_bytes=int(lc.act_w_bytes * r),
            out_bytes=int(lc.out_bytes * r), flops=lc.flops * r) for lc in self.layers)
        pairs = {k: v * t for k, v in self.pairs.items()}
        curve = tuple((s, v / t) for s, v in self.size_curve)
        seen: dict[int, CostTable] = {}
        ranks = tuple(seen.setdefault(id(r), r.at_microbatch_size(microbatch_size)) for r in self.rank_tables)
        return replace(self, layers=layers, pairs=pairs, microbatch_size=microbatch_size,
                       size_curve=curve, rank_tables=ranks)
