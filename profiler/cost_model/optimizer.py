"""Data-parallel gradient/parameter traffic and the optimizer step, per GPU and step.

- Distributed optimizer (Megatron ``--use-distributed-optimizer``): gradients are
  reduce-scattered in fp32 (4 B; Megatron's default ``grad_reduce_in_fp32`` for BF16
  mixed precision; 2 B with ``grad_reduce_in_fp32: false``) and updated parameters all-gathered in BF16 (2 B), each a ring over
  the data-parallel x context-parallel group (experts: their expert-data-parallel
  group). Megatron overlaps the reduce-scatter with the last microbatch's backward
  (``--overlap-grad-reduce``) and the all-gather with the first forward of the next
  step (``--overlap-param-gather``): only the part longer than one microbatch's forward
  + backward on the rank is exposed. Without it, an all-reduce (2x the reduce-scatter).
- FSDP (torch FSDP2 / Megatron-FSDP): per microbatch, weights are all-gathered in the
  forward and again in the backward (``reshard_after_forward``) and gradients
  reduce-scattered, prefetched one layer ahead: exposed is what exceeds the
  microbatch's compute, plus the first layer's gather.
- The Adam step is memory bound: it reads the fp32 master weight, gradient, m and v
  and writes the master weight, m, v and the BF16 weight: 30 bytes per local parameter
  (torch.optim.Adam's fused/foreach update; Megatron's fused Adam), at HBM x 0.8. With
  ``param_dtype: bf16`` (no master copy) it reads the BF16 weight, gradient, m and v and
  writes the weight, m and v: 14 bytes.
- Over sites (``cluster.sites`` with ``crossing: dp``): each ring runs inside a site, then
  across the sites over the slow link (``comm.site_ring_seconds``).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.cluster import ClusterSpec
from profiler.cost_model.comm import link_bandwidth, ring_seconds, site_ring_seconds
from profiler.cost_model.context import HBM_EFF

__all__ = ["DpCost", "dp_step_cost", "ADAM_BYTES_PER_PARAM", "ADAM_BYTES_PER_PARAM_BF16"]

ADAM_BYTES_PER_PARAM = 30
ADAM_BYTES_PER_PARAM_BF16 = 14
"""Adam's traffic per parameter when parameters and moments are BF16 (``param_dtype: bf16``):
read w, g, m, v and write w, m, v, 2 bytes each (torch/optim/adam.py ``_multi_tensor_adam``)."""


@dataclass(frozen=True, kw_only=True)
class DpCost:
    """Per-step data-parallel and optimizer time of one GPU."""

    comm_s: float
    """Gradient/parameter communication in all, seconds."""
    exposed_s: float
    """Part of it not hidden behind compute, seconds."""
    optimizer_s: float
    """Adam step, seconds (never hidden)."""


def dp_step_cost(cluster: ClusterSpec, *, dense_params: float, expert_params: float,
                 microbatch_compute_s: float, microbatches: int, layers: int) -> DpCost:
    """``dense_params`` / ``expert_params``: parameters this GPU holds unsharded by DP
    (after tp / pp / ep x etp); ``microbatch_compute_s``: one microbatch's forward +
    backward on this GPU; ``microbatches``: microbatches per step on this GPU."""
    par, tr = cluster.parallel, cluster.training
    span = par.tp * par.cp * par.dp
    bw = link_bandwidth(cluster, span)
    crossing = cluster.sites.count > 1 and cluster.sites.crossing == "dp"

    def ring(nbytes: float, ranks: int, bandwidth: float) -> float:  # the DP rings, across sites when dp crosses
        if crossing:
            return site_ring_seconds(nbytes, ranks, bandwidth, cluster)
        return ring_seconds(nbytes, ranks, bandwidth)

    groups = ((dense_params, par.dp * par.cp),
              (expert_params, max(par.dp * par.cp * par.tp // (par.ep * par.etp), 1)))
    sharded = sum(p / (n if tr.distributed_optimizer or tr.fsdp else 1) for p, n in groups)
    adam = ADAM_BYTES_PER_PARAM if tr.param_dtype == "fp32" else ADAM_BYTES_PER_PARAM_BF16
    optimizer = sharded * adam / (cluster.gpu.hbm_bandwidth * HBM_EFF)
    if tr.fsdp:
        per_mb = sum(2 * ring(2 * p, n, bw) + ring(4 * p, n, bw) for p, n in groups)
        exposed = microbatches * max(0.0, per_mb - microbatch_compute_s) + per_mb / max(layers, 1)
        return DpCost(comm_s=microbatches * per_mb, exposed_s=exposed, optimizer_s=optimizer)
    g = 4 if tr.grad_reduce_in_fp32 else 2  # Megatron's gradient buffer dtype (TrainingSpec.grad_reduce_in_fp32)
    if tr.distributed_optimizer:
        comm = sum(ring(g * p, n, bw) + ring(2 * p, n, bw) for p, n in groups)
    else:
        comm = sum(2 * ring(g * p, n, bw) for p, n in groups)
    return DpCost(comm_s=comm, exposed_s=max(0.0, comm - microbatch_compute_s), optimizer_s=optimizer)
