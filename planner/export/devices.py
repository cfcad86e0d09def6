"""The one line an export adds for a mixed-fleet plan: which GPUs each pipeline rank must be.

No exported format names a device per stage (Megatron's layout string, torchtitan's and
torch's schedule CSV, DeepSpeed's ``PipelineModule`` parts hold layers and order only), so
the plan runs as planned only when the launch puts each pipeline rank on its stage's group.
Every one of them makes pp the outermost rank dimension (Megatron's default ``order
tp-cp-ep-dp-pp`` in megatron/core/parallel_state.py; torchtitan's mesh
``["pp", "dp_replicate", "dp_shard", "cp", "tp"]``; DeepSpeed's ``PipeDataParallelTopology``
axes ``["pipe", "data"]``): global ranks ``[r W, (r + 1) W)`` are pipeline rank r, W the
ranks' tp x cp x dp GPUs, so node order decides.
"""

from __future__ import annotations

from planner.core.plan import Plan

__all__ = ["device_note"]


def device_note(plan: Plan, fmt: str) -> str | None:
    """The rank/node order note for ``plan`` exported as ``fmt``; None without device groups."""
    per_rank = {int(s.rank): s.device for s in plan.stages if s.device}
    if not per_rank:
        return None
    runs: list[list] = []
    for r in range(plan.pp):
        if runs and runs[-1][2] == per_rank.get(r):
            runs[-1][1] = r
        else:
            runs.append([r, r, per_rank.get(r)])
    groups = ", ".join(f"{a}-{b} {d}" if a != b else f"{a} {d}" for a, b, d in runs)
    p = plan.parallel
    width = p.tp * p.get("cp", 1) * p.dp
    return (f"mixed fleet: pipeline ranks {groups}; {fmt} cannot name a device per stage, so launch with "
            f"those groups' nodes in that order (pp is the outermost rank dimension: global ranks "
            f"[r x {width}, (r + 1) x {width}) are pipeline rank r)")
