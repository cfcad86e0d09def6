"""What switching plans costs: which layers change pipeline rank, bytes moved, time.

A layer that changes pipeline rank takes its parameters, gradient buffers and
optimizer state with it (``LayerCost.param_bytes + grad_bytes + optim_bytes``, per
GPU after tensor/expert/distributed-optimizer sharding; see profiler/analytical.py).
Every GPU of the source rank's group (``num_gpus / pp`` of them: dp x tp) sends its
shard to the matching GPU of the destination group, all pairs at once. The time is
set by the busiest GPU: ``max over ranks of max(bytes sent, bytes received) /
bandwidth`` per GPU (links are full duplex), with the bandwidth of a pipeline hop:
InfiniBand per GPU when a pipeline rank fills a node or more (``dp x tp >=
gpus_per_node``, the rule ``analytical_costs`` uses for P2P), else NVLink.

This is an in-place transfer between live ranks. Re-partitioning at a checkpoint
restart instead costs the save and load (not modelled). Gradient buffers are zero
right after an optimizer step, so moving at a step boundary could skip them; they are
counted, as the issue asks, making the estimate conservative.

Break-even: ``ceil(migration_s / (old step - new step))`` steps (None when the new
plan is not faster).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.core.cluster import ClusterSpec
from planner.core.costs import CostTable

__all__ = ["Move", "Migration", "migration"]


@dataclass(frozen=True, kw_only=True)
class Move:
    """One layer changing pipeline rank."""

    layer: int
    """ModelSpec layer index."""
    from_rank: int
    """Pipeline rank that holds it now."""
    to_rank: int
    """Pipeline rank that holds it in the new plan."""
    bytes_per_gpu: int
    """Parameters + gradients + optimizer state one GPU sends."""


@dataclass(frozen=True, kw_only=True)
class Migration:
    """Cost of moving from the old partition to the new one."""

    moves: tuple[Move, ...]
    """Layers that change rank, in layer order."""
    total_bytes: int
    """Bytes moved over the whole cluster (per-GPU bytes x GPUs per pipeline rank)."""
    seconds: float
    """Time of the transfer, busiest GPU at the pipeline-hop bandwidth."""
    bandwidth: float
    """Bytes per second per GPU used for the estimate."""

    def break_even_steps(self, old_step_s: float, new_step_s: float) -> int | None:
        """Steps after which the faster plan has paid for the move (None: never)."""
        saved = old_step_s - new_step_s
        if saved <= 0:
            return None if self.moves else 0
        return math.ceil(self.seconds / saved)

    def to_dict(self) -> list[dict]:
        """JSON form of the moves."""
        return [{"layer": m.layer, "from_rank": m.from_rank, "to_rank": m.to_rank,
                 "bytes_per_gpu": m.bytes_per_gpu} for m in self.moves]


def migration(table: CostTable, cluster: ClusterSpec, old_ranks: list[int],
              new_ranks: list[int]) -> Migration:
    """Moves from ``old_ranks[l]`` to ``new_ranks[l]`` (pipeline rank of each layer)."""
    par = cluster.parallel
    moves = tuple(Move(layer=k, from_rank=a, to_rank=b, bytes_per_gpu=table.layers[k].static_bytes)
                  for k, (a, b) in enumerate(zip(old_ranks, new_ranks)) if a != b)
    sent = [0] * par.pp
    received = [0] * par.pp
    for m in moves:
        sent[m.from_rank] += m.bytes_per_gpu
        received[m.to_rank] += m.bytes_per_gpu
    gpu = cluster.gpu
    cross_node = par.dp * par.tp >= cluster.gpus_per_node
    bw = gpu.ib_bandwidth if cross_node else gpu.nvlink_bandwidth
    busiest = max(max(sent), max(received))
    seconds = busiest / bw + (gpu.p2p_latency_s if moves else 0.0)
    group = cluster.num_gpus // par.pp
    return Migration(moves=moves, total_bytes=sum(m.bytes_per_gpu for m in moves) * group,
                     seconds=seconds, bandwidth=bw)
