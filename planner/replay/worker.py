"""What one pipeline rank does during a replay.

Order on every rank: join the process group (timeout on every collective and
receive) -> build its stages -> measure the peak (CPU) and, when the plan was made
for other hardware, layer costs here -> load the plan's actions into torch's
``_PipelineScheduleRuntime`` -> one step whose gradients are kept for the check ->
warm-up steps -> timed steps -> send everything to rank 0. Rank 0 then runs the
single-process reference and assembles the report.

Engine: torch.distributed.pipelining runs every action of the plan (F, I, W, B,
``OVERLAP_F_B``); this module only times it. Two engine facts shape the figures:
``OVERLAP_F_B`` runs its forward and backward one after the other (no concurrent
streams), and I on stage 0 is a no-op whose work W does (see ``predict``).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from planner.core.plan import Plan
from planner.replay import device as dev
from planner.replay.lowering import to_torch_actions
from planner.replay.model import ReplayModel, build_stage, loss_fn, make_batch, replay_model
from planner.replay.options import ReplayOptions
from planner.replay.timing import Clock, Recorder, TimedRuntime, TimedStage

__all__ = ["run_rank", "resolve_shape"]


def resolve_shape(plan: Plan, opts: ReplayOptions) -> tuple[float, int]:
    """(scale, seq_len) of the replay: the options, else the plan's profile."""
    scale = opts.scale if opts.scale is not None else float(plan.costs.get("scale", 1.0))
    seq = opts.seq_len or int(plan.costs.get("seq_len") or 0) \
        or int(plan.cluster.get("training", {}).get("seq_len", 0))
    return scale, seq


def _barrier(backend: str, timeout_s: float) -> None:
    if backend == "gloo":
        dist.monitored_barrier(timeout=timedelta(seconds=timeout_s), wait_all_ranks=True)
    else:
        dist.barrier()


def _threads(opts: ReplayOptions) -> int:
    local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
    return opts.threads or max(1, (os.cpu_count() or 1) // local)


def _inject(opts: ReplayOptions, rank: int) -> None:
    if opts.fault is None:
        return
    kind, _, target = opts.fault.partition(":")
    if int(target) != rank:
        return
    if kind == "die":
        os._exit(17)
    while True:  # hang: never reach the next receive
        time.sleep(3600)


def _peak(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        found = dev.gpu_peak(device)
        if found is not None:
            return found
    rate = torch.tensor([dev.measure_matmul_peak(device)], dtype=torch.float64, device=device)
    dist.all_reduce(rate)
    label = f"measured FP32 matmul peak of this machine, {torch.get_num_threads()} thread(s) per rank, mean over ranks"
    return float(rate) / dist.get_world_size(), label


def _prediction(plan: Plan, rm: ReplayModel, device: torch.device, rank: int) -> Any:
    """A cost table measured here, or None when the plan's own prediction applies.

    Every rank measures at once (see ``costs_here``)."""
    from planner.replay.costs_here import measure_layer_costs, measure_p2p
    from planner.replay.predict import is_exact_replay

    label = dev.device_label(device)
    if is_exact_replay(plan, device=label, scale=rm.scale, seq_len=rm.seq_len):
        return None
    table = measure_layer_costs(rm, device, Clock(device), label=label)
    if dist.get_world_size() > 1:
        nbytes = rm.microbatch_size * rm.seq_len * rm.spec.hidden * 4
        from dataclasses import replace

        table = replace(table, p2p=measure_p2p(rank, nbytes, device))
    return table


def _build(plan: Plan, rm: ReplayModel, rank: int, device: torch.device, recorder: Recorder):
    mods, stages = [], []
    for s, ((a, b), r) in enumerate(zip(plan.bounds(), plan.ranks())):
        if r == rank:
            mod = build_stage(rm, a, b, device)
            mods.append(mod)
            stages.append(TimedStage(mod, s, plan.num_stages, device, group=dist.group.WORLD,
                                     recorder=recorder))
    runtime = TimedRuntime(stages, plan.num_microbatches, loss_fn=loss_fn, scale_grads=True,
                           recorder=recorder)
    runtime._prepare_schedule_with_comms(to_torch_actions(plan.parsed_schedule()))
    return mods, runtime


def _step(runtime: TimedRuntime, rank_args: tuple, target: torch.Tensor, mods: list) -> list:
    for m in mods:
        m.zero_grad(set_to_none=True)
    losses: list = []
    runtime.step(*rank_args, target=target, losses=losses)
    return [float(x.detach()) for x in losses]


def _memory(device: torch.device, baseline: int) -> dict[str, Any]:
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        return {"peak_bytes": peak, "above_baseline_bytes": peak - baseline, "comparable": True,
                "label": "torch.cuda.max_memory_allocated during the timed steps"}
    peak = dev.peak_rss_bytes()
    return {"peak_bytes": peak, "above_baseline_bytes": peak - baseline, "comparable": False,
            "label": "process RSS high-water mark during the timed steps (includes the Python "
                     "and torch runtime; not comparable with the planner's model of GPU memory)"}


def _timed(runtime: TimedRuntime, recorder: Recorder, rank_args: tuple, target: torch.Tensor,
           mods: list, opts: ReplayOptions, backend: str) -> list[dict]:
    """Timed steps: zero gradients, barrier, step; spans relative to the step's start."""
    clock = recorder.clock
    steps = []
    for _ in range(opts.steps):
        for m in mods:
            m.zero_grad(set_to_none=True)
        _barrier(backend, opts.timeout_s)
        recorder.begin_step()
        runtime.step(*rank_args, target=target)
        end = clock.mark()
        steps.append({"step_s": clock.seconds(recorder.base, end),
                      "spans": [(s.stage, s.kind, s.microbatch, s.start, s.end) for s in recorder.spans()]})
    return steps


def _grads(mods: list) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().cpu().clone() for m in mods for n, p in m.named_parameters()
            if p.grad is not None}


def run_rank(plan_data: dict, opts: ReplayOptions, *, rank: int, world_size: int, local_rank: int,
             init_method: str) -> dict[str, Any] | None:
    """Replay on this rank; rank 0 returns the report pieces, the others None."""
    device, backend = dev.pick_device(local_rank)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=opts.timeout_s))
    try:
        if device.type == "cpu":
            torch.set_num_threads(_threads(opts))
        return _replay(Plan.from_dict(plan_data), opts, rank, device, backend)
    finally:
        dist.destroy_process_group()


def _replay(plan: Plan, opts: ReplayOptions, rank: int, device: torch.device,
            backend: str) -> dict[str, Any] | None:
    scale, seq = resolve_shape(plan, opts)
    rm = replay_model(plan, scale=scale, seq_len=seq, seed=opts.seed)
    baseline = dev.rss_bytes() if device.type == "cpu" else torch.cuda.memory_allocated(device)
    peak, peak_label = _peak(device)
    table = _prediction(plan, rm, device, rank)
    recorder = Recorder(Clock(device))
    mods, runtime = _build(plan, rm, rank, device, recorder)
    ids, target = make_batch(rm, device)
    rank_args = (ids,) if plan.ranks()[0] == rank else ()
    _inject(opts, rank)
    losses = _step(runtime, rank_args, target, mods)
    grads = _grads(mods) if opts.grad_check else {}
    for _ in range(opts.warmup):
        _step(runtime, rank_args, target, mods)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        dev.reset_peak_rss()
    steps = _timed(runtime, recorder, rank_args, target, mods, opts, backend)
    mine = {"rank": rank, "steps": steps, "memory": _memory(device, baseline), "losses": losses,
            "grads": grads, "threads": torch.get_num_threads()}
    gathered: list[Any] = [None] * dist.get_world_size() if rank == 0 else []
    dist.gather_object(mine, gathered if rank == 0 else None, dst=0)
    if rank != 0:
        return None
    return {"ranks": gathered, "table": table, "peak": (peak, peak_label), "rm": rm,
            "device": dev.device_label(device), "torch_device": device, "backend": backend}
