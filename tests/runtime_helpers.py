"""Two gloo processes running fused-pair schedules with and without the overlap runtime.

``run_cases`` (spawned, one call per rank) builds a small Qwen3-Next slice (embedding,
gated-linear-attention MoE, full-attention MoE, MTP, head) at reduced width, runs each
case's schedule once sequentially (torch's own loop) and once with
``planner.runtime.attach``, and writes losses, gradients and (fused run) each pair's
overlap trace (``planner.runtime.trace``) for the test to compare with a
single-process reference (``reference``).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

LAYERS = (0, 1, 2, 3, 4, 49, 50)
"""Qwen3-Next layer indices: embedding, 3 linear-attention MoE, 1 GQA MoE, MTP, head."""
MODEL = "qwen3-next-80b-a3b"
SCALE = 0.02
SEQ = 8
ROWS = 2
"""Sequences per microbatch."""
MICROBATCHES = 4
LINK_S = 0.002
"""Emulated link time of each exchange (seconds)."""


def _spec():
    from planner.core.hf_config import load_model
    from profiler.layers import scaled_model

    spec = load_model(MODEL)
    return spec, scaled_model(spec, SCALE)


def build(layers: tuple[int, ...], group: Any, recompute: str = "none") -> torch.nn.Module:
    """A stage of ``layers`` (global indices), MoE exchanges over ``group``."""
    from planner.replay.lowering import StageModule
    from planner.runtime import apply_recompute
    from profiler.layers import build_layer

    spec, _ = _spec()
    mods = {k: build_layer(spec, spec.layers[k], scale=SCALE, ep_group=group, seed=0) for k in layers}
    apply_recompute(list(mods.values()), recompute)
    return StageModule(mods)


def batch(ep_rank: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, targets) of one step for data-parallel rank ``ep_rank``."""
    _, small = _spec()
    g = torch.Generator().manual_seed(100 + ep_rank)
    shape = (MICROBATCHES * ROWS, SEQ)
    return torch.randint(0, small.vocab, shape, generator=g), torch.randint(0, small.vocab, shape, generator=g)


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    from profiler.layers import loss_fn as f

    return f(logits, target)


def reference(recompute: str, ep: int = 1) -> tuple[list[float], dict[str, torch.Tensor]]:
    """One process, all experts local, microbatch by microbatch; the step's gradients are
    the mean over microbatches and over the ``ep`` data-parallel ranks' batches, divided
    at the end as torch's runtime does (the MTP loss's gradient is 1 per microbatch,
    Megatron ``MTPLossAutoScaler``, so scaling each loss would not be the same)."""
    from profiler.layers.program import EmulatedLink

    model = build(LAYERS, EmulatedLink(seconds={}), recompute)
    losses = []
    for r in range(ep):
        ids, target = batch(r)
        for x, y in zip(ids.tensor_split(MICROBATCHES), target.tensor_split(MICROBATCHES)):
            loss = loss_fn(model(x), y)
            loss.backward()
            losses.append(float(loss.detach()))
    return losses, {n: p.grad / (MICROBATCHES * ep) for n, p in model.named_parameters() if p.grad is not None}


def _stage_layers(num_stages: int) -> list[tuple[int, ...]]:
    cuts = {1: (0, 7), 2: (0, 3, 7), 4: (0, 2, 3, 5, 7)}[num_stages]
    return [LAYERS[a:b] for a, b in zip(cuts, cuts[1:])]


def _actions(schedule: dict) -> dict[int, list[Any]]:
    from torch.distributed.pipelining.schedules import _Action

    return {r: [_Action.from_str(str(a)) for a in acts] for r, acts in sorted(schedule.items())}


def _one_step(case: dict, pp_rank: int, pp_group: Any, ep_group: Any, ep_rank: int, fused: bool):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    from planner.runtime import attach

    schedule = case["schedule"]
    ranks = case["stage_ranks"]
    stage_layers = _stage_layers(len(ranks))
    mods, stages = [], []
    for s, r in enumerate(ranks):
        if r == pp_rank:
            mods.append(build(stage_layers[s], ep_group, case["recompute"]))
            stages.append(PipelineStage(mods[-1], s, len(ranks), torch.device("cpu"), group=pp_group))
    rt = _PipelineScheduleRuntime(stages, MICROBATCHES, loss_fn=loss_fn, scale_grads=True)
    rt._prepare_schedule_with_comms(_actions(schedule))
    traces: list = []
    if fused:
        attach(rt, timeout_s=60, traces=traces)
    ids, target = batch(ep_rank)
    losses: list = []
    args = (ids,) if ranks[0] == pp_rank else ()
    rt.step(*args, target=target, losses=losses)
    grads = {f"layers.{n}": p.grad.clone() for m in mods for n, p in m.layers.named_parameters()
             if p.grad is not None}
    if ep_group is not None and not hasattr(ep_group, "seconds"):
        _sync_data_parallel(mods, ep_group, grads)
    return [float(x.detach()) for x in losses], grads, [t.to_rows() for t in traces]


def _sync_data_parallel(mods: list, ep_group: Any, grads: dict[str, torch.Tensor]) -> None:
    """Mean over the expert-parallel ranks (they are data-parallel for non-expert weights;
    expert weights already summed every rank's tokens in the all-to-all backward)."""
    size = dist.get_world_size(ep_group)
    for name, g in grads.items():
        if ".moe.w_" not in name:
            dist.all_reduce(g, group=ep_group)
        g /= size


def run_cases(rank: int, world: int, port: int, cases: list[dict], out_dir: str, ep: int) -> None:
    """Every case twice (sequential, fused); rank files ``out_dir/rank{r}.pt``."""
    from profiler.layers.program import EmulatedLink

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    pp = world // ep
    pp_rank, ep_rank = divmod(rank, ep)
    pp_groups = [dist.new_group([p * ep + e for p in range(pp)]) for e in range(ep)]
    ep_groups = [dist.new_group([p * ep + e for e in range(ep)]) for p in range(pp)]
    group = ep_groups[pp_rank] if ep > 1 else EmulatedLink(seconds={n: LINK_S for n in (
        "dispatch", "combine", "dispatch.grad", "combine.grad")})
    out = []
    for case in cases:
        seq = _one_step(case, pp_rank, pp_groups[ep_rank], group, ep_rank, fused=False)
        fus = _one_step(case, pp_rank, pp_groups[ep_rank], group, ep_rank, fused=True)
        out.append({"sequential": seq, "fused": fus})
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()
