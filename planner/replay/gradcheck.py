"""Correctness of a replayed step: its gradients and losses against one process.

The reference builds the whole model from the same seed on one process, runs the
same microbatches (the same slices torch's runtime cuts: dim 0, in order), sums
each microbatch's gradient and divides by the microbatch count at the end, as
``_PipelineScheduleRuntime`` does with ``scale_grads=True`` (REDUCE_GRAD). Each
microbatch's forward is the same arithmetic in both runs, so the losses should be
bitwise equal; gradients may differ by summation order, hence a tolerance.
"""

from __future__ import annotations

from typing import Any

import torch

from planner.replay.model import ReplayModel, build_stage, loss_fn, make_batch

__all__ = ["reference_step", "compare_grads", "RTOL", "ATOL"]

RTOL = 1e-4
"""Relative tolerance per gradient element (FP32 summation order)."""
ATOL = 1e-6
"""Absolute tolerance per gradient element."""


def reference_step(rm: ReplayModel, device: torch.device) -> tuple[list[float], dict[str, torch.Tensor]]:
    """(loss per microbatch, gradient per parameter name) of one step on one process."""
    model = build_stage(rm, 0, rm.spec.num_layers, device)
    m = rm.microbatches
    losses = []
    for e in range(rm.ep):  # expert parallel: each EP rank's batch, gradients averaged over them
        ids, target = make_batch(rm, device, ep_rank=e)
        for x, y in zip(ids.tensor_split(m), target.tensor_split(m)):
            loss = loss_fn(model(x), y)
            loss.backward()
            losses.append(float(loss.detach()))
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            grads[name] = (p.grad / (m * rm.ep)).cpu()
    return losses, grads


def compare_grads(grads: dict[str, torch.Tensor], losses: list[float],
                  ref_grads: dict[str, torch.Tensor], ref_losses: list[float], *,
                  loss_rtol: float = 0.0) -> dict[str, Any]:
    """``passed``, ``max_abs_diff`` (gradients), ``loss_max_abs_diff`` and what failed.
    ``loss_rtol`` > 0 when the experts ran on other ranks: the padded capacity mode runs
    every source rank's rows in one batched GEMM, which may round differently; dropless
    experts give each source rank's rows a GEMM of their own ([Note: one GEMM per source
    rank] in ``profiler.layers.moe``), so their losses are bitwise equal, as they must be
    with every expert local."""
    missing = sorted(set(ref_grads) ^ set(grads))
    max_abs = 0.0
    worst = ""
    bad = []
    for name in sorted(set(ref_grads) & set(grads)):
        diff = (grads[name] - ref_grads[name]).abs()
        d = float(diff.max()) if diff.numel() else 0.0
        if d > max_abs:
            max_abs, worst = d, name
        if not torch.allclose(grads[name], ref_grads[name], rtol=RTOL, atol=ATOL):
            bad.append(name)
    loss_diff = max((abs(a - b) for a, b in zip(losses, ref_losses)), default=float("inf"))
    same_count = len(losses) == len(ref_losses)
    return {
        "passed": not missing and not bad and same_count
        and loss_diff <= loss_rtol * max((abs(x) for x in ref_losses), default=0.0),
        "max_abs_diff": max_abs,
        "worst_parameter": worst,
        "loss_max_abs_diff": loss_diff,
        "losses": losses,
        "reference_losses": ref_losses,
        "parameters": len(ref_grads),
        "mismatched": bad[:8],
        "missing": missing[:8],
        "rtol": RTOL,
        "atol": ATOL,
    }
