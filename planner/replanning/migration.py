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

``device_migration`` is the same cost between two plans of any shape (another GPU count,
other degrees, lost GPUs), per device: [Note: device migration].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collections import defaultdict

from planner.core.cluster import ClusterSpec
from planner.core.costs import CostTable
from planner.core.layer_math import layer_params
from planner.core.model import ModelSpec
from profiler.analytical import state_bytes

__all__ = ["Move", "Migration", "migration", "hop_bandwidth", "Placement", "LayerTransfer", "DeviceMigration",
           "device_migration", "CHECKPOINT"]

CHECKPOINT = -1
"""Source device of a shard no surviving GPU holds: read from the checkpoint."""


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
    bw = hop_bandwidth(cluster)
    busiest = max(max(sent), max(received))
    seconds = busiest / bw + (cluster.gpu.p2p_latency_s if moves else 0.0)
    group = cluster.num_gpus // par.pp
    return Migration(moves=moves, total_bytes=sum(m.bytes_per_gpu for m in moves) * group,
                     seconds=seconds, bandwidth=bw)


def hop_bandwidth(cluster: ClusterSpec) -> float:
    """Bytes/s per GPU of a pipeline hop: InfiniBand when a pipeline rank fills a node or more
    (``dp x tp >= gpus_per_node``, the rule ``analytical_costs`` uses for P2P), else NVLink
    (the preset's figures, as routing re-plans have always used)."""
    par, gpu = cluster.parallel, cluster.gpu
    return gpu.ib_bandwidth if par.dp * par.tp >= cluster.gpus_per_node else gpu.nvlink_bandwidth


# [Note: device migration]
# Megatron's default rank order (tp-cp-ep-dp-pp, first fastest; ``megatron_layout``) puts
# pipeline rank r on global ranks r*G .. (r+1)*G - 1, G = world / pp, and the offset inside
# that block fixes the GPU's tensor/context/data/expert coordinates, hence its shard. A GPU
# keeps a layer's state when it holds the layer before and after at the same offset under
# the same sharding degrees; every other holder after receives its whole new shard
# (``state_bytes`` of the new degrees: BF16 weights, FP32 gradients, optimizer state): from
# itself when it held the layer at another offset (re-sliced in place, no link), else from
# one surviving holder before, on its own node when there is one, round robin otherwise.
# dist-ckpt's reshard reads the same bytes from several peers, so the byte count is exact
# and the per-GPU time conservative. A shard no survivor holds comes from the checkpoint;
# under the distributed optimizer a lost GPU took its optimizer shard with it, so every
# receiver of that layer reads the optimizer state from the checkpoint (its read time is
# not modelled: no storage bandwidth in the cluster model). Time: per GPU, the larger of
# bytes sent and received on NVLink (same node: device // gpus_per_node) over NVLink
# bandwidth plus the same on the network, busiest GPU, plus one P2P latency.


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a plan's layers live ([Note: device migration])."""

    cluster: ClusterSpec
    """The plan's cluster (degrees and sharding)."""
    layer_ranks: tuple[int, ...]
    """Pipeline rank of every layer."""
    devices: tuple[int, ...]
    """Device id of each global rank (the old plan's global rank numbers the devices)."""

    def holders(self, layer: int) -> range:
        """Global ranks holding ``layer``."""
        group = len(self.devices) // self.cluster.parallel.pp
        return range(self.layer_ranks[layer] * group, (self.layer_ranks[layer] + 1) * group)

    def shard_key(self) -> tuple:
        """What fixes a shard besides the offset: degrees and sharding switches."""
        p, t = self.cluster.parallel, self.cluster.training
        return p.tp, p.cp, p.dp, p.ep, p.etp, t.distributed_optimizer, t.fsdp


@dataclass(frozen=True, kw_only=True)
class LayerTransfer:
    """One layer's state: devices before and after, and who sends what."""

    layer: int
    """ModelSpec layer index."""
    before: tuple[int, ...]
    """Devices holding it in the old plan (lost ones included)."""
    after: tuple[int, ...]
    """Devices holding it in the new plan."""
    kept: tuple[int, ...]
    """Devices of ``after`` that already hold their new shard."""
    sends: tuple[tuple[int, int], ...]
    """(source device or ``CHECKPOINT``, destination device) for every other device of ``after``."""
    bytes_per_gpu: int
    """New shard per GPU: parameters + gradients + optimizer state."""
    optimizer_bytes_per_gpu: int
    """Of it, optimizer state."""
    optimizer_lost: bool
    """A lost GPU held an optimizer shard: receivers read the optimizer state from the checkpoint."""


@dataclass(frozen=True, kw_only=True)
class DeviceMigration:
    """Moving every layer's state from one placement to another ([Note: device migration])."""

    layers: tuple[LayerTransfer, ...]
    """Per layer, in layer order."""
    link_bytes: dict[str, int]
    """Bytes received over ``nvlink``, over the ``network``, from the ``checkpoint``, and
    re-sliced ``local``ly (a GPU re-sharding a layer it held: no link)."""
    seconds: float
    """Transfer time between GPUs: the busiest GPU plus one latency (checkpoint reads not modelled)."""
    busiest_device: int | None
    """The device that sets ``seconds`` (None when nothing moves between GPUs)."""
    bandwidth: dict[str, float]
    """Bytes/s per GPU of ``nvlink`` and ``network``."""

    @property
    def bytes_moved(self) -> int:
        """Every byte a GPU receives over a link or from the checkpoint."""
        return sum(v for k, v in self.link_bytes.items() if k != "local")


def device_migration(model: ModelSpec, old: Placement, new: Placement, *, lost: frozenset[int] = frozenset()
                     ) -> DeviceMigration:
    """Per-layer moves from ``old`` to ``new`` when the devices in ``lost`` are gone."""
    cl = new.cluster
    gpn = cl.gpus_per_node
    same_shards = old.shard_key() == new.shard_key()
    traffic: dict[int, list[float]] = defaultdict(lambda: [0.0] * 4)  # sent/received nvlink, network
    links = {"nvlink": 0, "network": 0, "checkpoint": 0, "local": 0}
    out = []
    for layer in model.layers:
        k = layer.index
        param_b, grad_b, optim_b = state_bytes(layer_params(layer, model), cl)
        shard, optim = int(param_b + grad_b + optim_b), int(optim_b)
        before_ranks = old.holders(k)
        before = tuple(old.devices[g] for g in before_ranks)
        offset_before = {old.devices[g]: g - before_ranks.start for g in before_ranks}
        after_ranks = new.holders(k)
        after = tuple(new.devices[g] for g in after_ranks)
        kept = tuple(new.devices[g] for g in after_ranks if same_shards and new.devices[g] not in lost
                     and offset_before.get(new.devices[g]) == g - after_ranks.start)
        survivors = [d for d in before if d not in lost]
        optimizer_lost = len(survivors) < len(before) and (cl.training.distributed_optimizer or cl.training.fsdp)
        sends = _sources(survivors, [d for d in after if d not in set(kept)], gpn)
        for src, dst in sends:
            peer = shard - (optim if optimizer_lost else 0) if src != CHECKPOINT else 0
            links["checkpoint"] += shard - peer
            if peer and src == dst:
                links["local"] += peer
            elif peer:
                kind = 0 if src // gpn == dst // gpn else 2
                links["nvlink" if kind == 0 else "network"] += peer
                traffic[src][kind] += peer
                traffic[dst][kind + 1] += peer
        out.append(LayerTransfer(layer=k, before=before, after=after, kept=kept, sends=tuple(sends),
                                 bytes_per_gpu=shard, optimizer_bytes_per_gpu=optim, optimizer_lost=optimizer_lost))
    bw = {"nvlink": cl.nvlink_bandwidth, "network": cl.network_bandwidth}
    per_device = {d: max(t[0], t[1]) / bw["nvlink"] + max(t[2], t[3]) / bw["network"] for d, t in traffic.items()}
    busiest = max(per_device, key=lambda d: (per_device[d], -d)) if per_device else None
    seconds = per_device[busiest] + cl.gpu.p2p_latency_s if busiest is not None else 0.0
    return DeviceMigration(layers=tuple(out), link_bytes=links, seconds=seconds, busiest_device=busiest,
                           bandwidth=bw)


def _sources(survivors: list[int], receivers: list[int], gpus_per_node: int) -> list[tuple[int, int]]:
    """(source, destination) per receiver: itself when it survives holding the layer, else a
    survivor on its node, else any, round robin."""
    held = set(survivors)
    by_node: dict[int, list[int]] = defaultdict(list)
    for d in survivors:
        by_node[d // gpus_per_node].append(d)
    turn: dict[int, int] = defaultdict(int)
    out = []
    for k, dst in enumerate(receivers):
        local = by_node.get(dst // gpus_per_node)
        if dst in held:
            out.append((dst, dst))
        elif local:
            out.append((local[turn[dst // gpus_per_node] % len(local)], dst))
            turn[dst // gpus_per_node] += 1
        else:
            out.append((survivors[k % len(survivors)] if survivors else CHECKPOINT, dst))
    return out
