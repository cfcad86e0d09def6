"""The emulated expert-parallel link of ``ppplan replay --link emulated``.

Every MoE all-to-all becomes a local copy of the same rows whose work completes no
earlier than its issue time plus the time the analytical cost model
(``profiler.analytical``, the plan's model on the plan's cluster) gives it:
``a2a_f / 2`` for the forward dispatch and combine, ``a2a_b / 2`` for their gradients,
scaled to the replay's all-to-all bytes (hidden width x tokens per microbatch, relative
to the plan's) and by ``--link-scale``. Compute stays real. On a machine whose
loopback copies cost as much as the compute they should hide (2 shared CPU cores), it
is the way to see hiding at a GPU-like communication share; every figure made with it
is labelled emulated.
"""

from __future__ import annotations

from typing import Any, Callable

from planner.core.plan import Plan

__all__ = ["emulated_links", "LINK_LABEL"]

LINK_LABEL = "EMULATED expert-parallel link: all-to-alls are local copies held to the analytical model's time"


def emulated_links(plan: Plan, rm: Any, *, scale: float) -> Callable[[int], Any]:
    """``layer index -> EmulatedLink`` for ``plan`` replayed as ``rm``."""
    from planner.core.cluster import cluster_from_dict
    from planner.core.hf_config import load_model
    from profiler.analytical import analytical_costs
    from profiler.layers.program import EmulatedLink

    full = load_model(str(plan.model["name"]))
    par = {k: plan.parallel[k] for k in ("pp", "tp", "ep", "dp") if k in plan.parallel}
    table = analytical_costs(full, cluster_from_dict({**plan.cluster, "parallel": {**plan.cluster.get("parallel", {}), **par}}))
    plan_seq = int(plan.costs.get("seq_len") or plan.cluster.get("training", {}).get("seq_len") or rm.seq_len)
    plan_mbs = int(plan.costs.get("microbatch_size") or rm.microbatch_size)
    factor = scale * (rm.spec.hidden / full.hidden) * (rm.seq_len * rm.microbatch_size) / (plan_seq * plan_mbs)
    links = {}
    for k, lc in enumerate(table.layers):
        f, b = lc.a2a_f / 2 * factor, lc.a2a_b / 2 * factor
        links[k] = EmulatedLink(seconds={"dispatch": f, "combine": f, "dispatch.grad": b, "combine.grad": b})
    return lambda k: links[k]
