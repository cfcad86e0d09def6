"""Communication times: expert-parallel all-to-all (hierarchical), TP/SP and CP collectives.

The EP all-to-all splits each token's copies between NVLink (the own node's ranks) and
the NIC (other nodes), with per-node deduplication for DeepEP/HybridEP (``a2a_seconds``).
TP with sequence parallelism: per layer two all-gathers and two reduce-scatters of the
sequence (forward and backward), ring algorithm: bytes x (tp - 1) / tp each (Korthikanti
et al. 2022, "Reducing Activation Recomputation", section 4.2.2). CP (ring attention,
Megatron ``--context-parallel-size`` with ``p2p`` communication): each attention layer
passes its K and V chunk around the ring, cp - 1 steps, overlapped with the attention-core
blocks (Liu et al. 2023, "Ring Attention"); backward also passes dK and dV. Only the part
longer than the attention core is exposed.
"""

from __future__ import annotations

from planner.core.cluster import ClusterSpec
from planner.core.model import ModelSpec

__all__ = ["A2A_LATENCY_S", "a2a_seconds", "remote_nodes_per_token", "ring_seconds", "link_bandwidth",
           "site_ring_seconds"]

A2A_LATENCY_S = 30e-6
"""Per-call all-to-all latency (DeepEP README: internode dispatch/combine latency of tens of us)."""


def link_bandwidth(cluster: ClusterSpec, group_span: int) -> float:
    """Bandwidth of a collective over a group spanning ``group_span`` consecutive GPUs."""
    return cluster.nvlink_bandwidth if group_span <= cluster.gpus_per_node else cluster.network_bandwidth


def remote_nodes_per_token(model: ModelSpec, nodes: int) -> float:
    """Expected distinct other nodes a token's copies reach, with per-node deduplication.

    With k uniform picks over ``nodes`` nodes the expected number of distinct nodes is
    ``nodes x (1 - (1 - 1/nodes)^k)``, capped by node-limited routing (DeepSeek-V3 sends a
    token to at most ``topk_group`` = 4 of its ``n_group`` = 8 expert groups, one group per
    node at EP 64: arXiv:2412.19437 section 2.1.2), times (nodes - 1) / nodes.
    """
    k = model.moe.top_k
    distinct = nodes * (1.0 - (1.0 - 1.0 / nodes) ** k)
    moe = model.moe
    if moe.expert_groups and moe.groups_per_token:
        distinct = min(distinct, moe.groups_per_token * max(1.0, nodes / moe.expert_groups))
    return distinct * (nodes - 1) / nodes


def a2a_seconds(cluster: ClusterSpec, model: ModelSpec, tokens: float, token_bytes: float) -> float:
    """One dispatch (or combine) of ``tokens`` local tokens of ``token_bytes`` each.

    The EP group's ranks are consecutive in Megatron's expert rank order (etp fastest, then
    ep: megatron/core/parallel_state.py ``RankGenerator``), so it spans ``nodes = ep x etp /
    gpus_per_node`` nodes and a node holds ``ep / nodes`` of its ranks. Routing is balanced
    (the published runs force it): a copy goes to each EP rank with probability 1/ep.
    NVLink carries the copies for the own node's other ranks, the NIC those for other
    nodes: each copy with NCCL, one per distinct remote node with a deduplicating
    dispatcher (DeepEP, HybridEP), which forwards them over NVLink in the destination node.
    Both links run at once: latency + max(NVLink bytes / bandwidth, NIC bytes / bandwidth),
    at DeepEP's all-to-all bandwidths (planner/core/hardware.py), scaled when the cluster's
    network section overrides the links.
    """
    par = cluster.parallel
    if par.ep == 1 or tokens <= 0:
        return 0.0
    gpu = cluster.gpu
    nodes = max(1, par.ep * par.etp // cluster.gpus_per_node)
    local = par.ep / nodes
    k = model.moe.top_k
    remote_copies = k * (par.ep - local) / par.ep
    if cluster.network.kind.dedup_per_node and nodes > 1:
        nic_copies = remote_nodes_per_token(model, nodes)
        nvlink_copies = k * (local - 1) / par.ep + remote_copies
    else:
        nic_copies = remote_copies
        nvlink_copies = k * (local - 1) / par.ep
    nvlink_bw = gpu.a2a_intranode_bandwidth * cluster.nvlink_bandwidth / gpu.nvlink_bandwidth
    nic_bw = gpu.a2a_internode_bandwidth * cluster.network_bandwidth / gpu.ib_bandwidth
    return A2A_LATENCY_S + tokens * token_bytes * max(nvlink_copies / nvlink_bw, nic_copies / nic_bw)


def ring_seconds(nbytes: float, ranks: int, bandwidth: float) -> float:
    """One ring all-gather or reduce-scatter whose full result is ``nbytes``."""
    return 0.0 if ranks <= 1 else nbytes * (ranks - 1) / ranks / bandwidth


def site_ring_seconds(nbytes: float, ranks: int, bandwidth: float, cluster: ClusterSpec) -> float:
    """One all-gather or reduce-scatter whose full result is ``nbytes`` over ``ranks`` GPUs
    split evenly over ``cluster.sites``' sites, hierarchically: a ring inside each site over
    its ``ranks / sites`` GPUs (``bandwidth``), then a ring across the sites over the shard
    each GPU holds, one latency per step, every GPU of a site sharing the inter-site link
    (``SitesSpec.link``; the 2D/hierarchical collective of NCCL's tree/CollNet and of
    CrossPipe's cross-datacenter DP, ATC'25). One site: ``ring_seconds``."""
    sites = cluster.sites.count
    if sites == 1 or ranks < sites:
        return ring_seconds(nbytes, ranks, bandwidth)
    local = ranks // sites
    link = cluster.sites.link(cluster.num_gpus // sites)
    return ring_seconds(nbytes, local, bandwidth) + ring_seconds(nbytes / local, sites, link.bandwidth) + \
        (sites - 1) * link.latency_s
