"""Run a ppplan plan on torch.distributed.pipelining: ``PipelineStage``s + ``_PipelineScheduleRuntime``.

    python examples/torch_pipelining.py                       # plans llama3-8b, pp 2, 4 microbatches
    python examples/torch_pipelining.py --vpp 2 --schedule interleaved
    python examples/torch_pipelining.py --plan plan.json --plan other.json

CPU only (gloo on 127.0.0.1, one process per pipeline rank). Every plan layer becomes a
small Linear + tanh block, so the run has the plan's stages, stage-to-rank placement and
exact per-rank action order (the CSV from ``LaunchPlan.torch_csv()``) while the model stays
tiny. Fused ``OVERLAP_F_B`` actions run through ppplan's overlap runtime, attached in
one call (``planner.runtime.attach(schedule)``): forward and backward concurrent, taking
turns at every MoE all-to-all (these Linear + tanh blocks have none, so here the halves
simply take turns). Each rank checks its gradients and the last stage its losses
against a single-process reference; the script exits non-zero on any mismatch.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import sys
import tempfile
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

HIDDEN = 16
ROWS_PER_MICROBATCH = 2
TOLERANCE = 1e-5


def tiny_layers(num_layers: int) -> nn.ModuleList:
    """One Linear + tanh block per plan layer, the same on every rank (fixed seed)."""
    torch.manual_seed(0)
    return nn.ModuleList(nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh()) for _ in range(num_layers))


def batch(microbatches: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets for one step (fixed seed)."""
    g = torch.Generator().manual_seed(1)
    rows = microbatches * ROWS_PER_MICROBATCH
    return torch.randn(rows, HIDDEN, generator=g), torch.randn(rows, HIDDEN, generator=g)


def reference(layers: nn.ModuleList, x: torch.Tensor, y: torch.Tensor, microbatches: int):
    """Per-microbatch losses and gradients of the whole model without pipelining."""
    model = copy.deepcopy(layers)
    losses = []
    for xm, ym in zip(x.chunk(microbatches), y.chunk(microbatches)):
        out = xm
        for layer in model:
            out = layer(out)
        loss = nn.functional.mse_loss(out, ym)
        (loss / microbatches).backward()
        losses.append(loss.detach())
    return losses, model


def run_plan(plan_dict: dict, rank: int, workdir: str) -> str:
    """Run one step of the plan on this rank and compare with the reference; returns a report line."""
    from planner.export import LaunchPlan
    from planner.runtime import attach

    plan = LaunchPlan.from_dict(plan_dict)
    bounds, ranks, m = plan.bounds(), plan.ranks(), plan.num_microbatches
    layers = tiny_layers(int(plan.model.num_layers))
    mine = [s for s, r in enumerate(ranks) if r == rank]
    stages = [PipelineStage(nn.Sequential(*copy.deepcopy(layers[a:b])), s, plan.num_stages,
                            torch.device("cpu"), group=dist.group.WORLD)
              for s, (a, b) in ((s, bounds[s]) for s in mine)]
    schedule = _PipelineScheduleRuntime(stages, n_microbatches=m, loss_fn=nn.functional.mse_loss)
    csv_path = os.path.join(workdir, f"schedule_rank{rank}.csv")
    with open(csv_path, "w") as fh:
        fh.write(plan.torch_csv())
    schedule._load_csv(csv_path)
    attach(schedule)  # OVERLAP_F_B pairs overlapped by ppplan's runtime
    x, y = batch(m)
    args = (x,) if 0 in mine else ()
    kwargs = {"target": y, "losses": []} if plan.num_stages - 1 in mine else {}
    schedule.step(*args, **kwargs)
    ref_losses, ref_model = reference(layers, x, y, m)
    worst = 0.0
    for stage, s in zip(stages, mine):
        a, _ = bounds[s]
        for k, block in enumerate(stage.submod):
            for p, q in zip(block.parameters(), ref_model[a + k].parameters()):
                worst = max(worst, (p.grad - q.grad).abs().max().item())
    if kwargs:
        got = torch.stack([loss.detach() for loss in kwargs["losses"]])
        worst = max(worst, (got - torch.stack(ref_losses)).abs().max().item())
    if worst > TOLERANCE:
        raise AssertionError(f"rank {rank}: pipelined results differ from the reference by {worst:.2e}")
    return f"rank {rank}: stages {mine}, {len(plan.actions(rank))} actions, max |diff| {worst:.1e}"


def worker(rank: int, world: int, port: int, plans: list[dict]) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}",
                            timeout=timedelta(seconds=120))
    try:
        with tempfile.TemporaryDirectory() as workdir:
            for k, plan_dict in enumerate(plans):
                line = run_plan(plan_dict, rank, workdir)
                report = [None] * world
                dist.all_gather_object(report, line)
                if rank == 0:
                    name = plan_dict["solver"].get("schedule", plan_dict["solver"].get("name"))
                    ranks = [st["rank"] for st in plan_dict["stages"]]
                    print(f"plan {k} ({plan_dict['model']['name']}, schedule {name}, "
                          f"stage ranks {ranks}):", flush=True)
                    print("\n".join("  " + r for r in report), flush=True)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="append", default=[], help="plan JSON (repeatable)")
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--pp", type=int, default=2)
    parser.add_argument("--vpp", type=int, default=1)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--schedule", default="1f1b")
    parser.add_argument("--placement", default="loop")
    opts = parser.parse_args(argv)
    from planner import load_plan, plan

    if opts.plan:
        plans = [load_plan(p) for p in opts.plan]
    else:
        plans = [plan(opts.model, pp=opts.pp, vpp=opts.vpp, microbatches=opts.microbatches,
                      schedule=opts.schedule, placement=opts.placement, work=2.0)]
    world = plans[0].pp
    if any(p.pp != world for p in plans):
        parser.error("all plans must have the same pp")
    mp.spawn(worker, args=(world, _free_port(), [json.loads(p.to_json()) for p in plans]),
             nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
