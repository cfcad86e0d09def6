"""What one pipeline rank does during a replay: join the group, build and load each plan's
stages, run the kept, warm-up and timed steps, measure the re-prediction's costs around
them, and send everything to rank 0 (the order and the engine are described below).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from planner.core.plan import Plan
from planner.core.schedule import ActionKind
from planner.replay import device as dev
from planner.replay.costs import emulated_links, fused_type_pairs, link_options, measure_hidden, measure_layer_costs
from planner.replay.device import bind_rank
from planner.replay.lowering import (Layout, ReplayModel, build_stage, loss_fn, make_batch, make_layout,
                                     merge_ranks, release_layout, replay_model, sync_gradients, to_torch_actions)
from planner.replay.options import ReplayOptions
from planner.replay.timing import Clock, Recorder, TimedRuntime, TimedStage, attach_timed
from planner.replay.torch_profile import label_stage, torch_profile
from profiler.timing import collector_off, freeze_setup

__all__ = ["run_rank", "resolve_shape"]

# What one pipeline rank does during a replay.
#
# Order on every rank: join the process group (timeout on every collective and
# receive) -> per plan: when it was made for other hardware or is replayed with the
# emulated link, layer costs here (once per model shape) and the link's scale; build its
# stages; load its actions into torch's ``_PipelineScheduleRuntime`` -> per plan, one step
# whose gradients are kept for the check -> warm-up steps -> timed steps -> layer costs here again, for the
# plans re-predicted ([Note: table around the steps]) -> send everything to rank 0. Rank 0
# then runs the single-process reference and assembles each plan's report.
#
# Several plans (same pipeline size) can share one launch: their warm-up and timed
# steps then alternate (plan 1, plan 2, ..., plan 1, ...), so that load from other
# jobs on a shared machine falls on every plan alike and comparisons between plans
# (and between a plan and a calibration plan) are paired step by step.
#
# Engine: torch.distributed.pipelining runs every action of the plan (F, I, W, B);
# ``OVERLAP_F_B`` actions run through ``planner.runtime`` (registered with
# ``attach``): the forward and the backward of the pair run concurrently, taking turns
# at every MoE all-to-all. A fused pair is recorded as one span covering the pair (on
# its forward part; its backward part gets a zero-length span at the pair's end), so
# busy time counts the pair once. Layers recompute as the plan's cluster says
# (``training.recompute``; ``planner.runtime.apply_recompute``). I on stage 0 is a
# no-op whose work W does (``planner.replay.predict`` [Note: torch first stage]).


def resolve_shape(plan: Plan, opts: ReplayOptions) -> tuple[float, int]:
    """(scale, seq_len) of the replay: the options, else the plan's profile."""
    scale = opts.scale if opts.scale is not None else float(plan.costs.get("scale", 1.0))
    seq = opts.seq_len or int(plan.costs.get("seq_len") or 0) \
        or int(plan.cluster.settings.get("seq_len", 0))
    return scale, seq


def _barrier(backend: str, timeout_s: float) -> None:
    if backend == "gloo":
        dist.monitored_barrier(timeout=timedelta(seconds=timeout_s), wait_all_ranks=True)
    else:
        dist.barrier()


def _local_world(world_size: int) -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", world_size))


def _threads(opts: ReplayOptions, world_size: int) -> int:
    return opts.threads or max(1, (os.cpu_count() or 1) // _local_world(world_size))


def _inject(opts: ReplayOptions, rank: int) -> None:
    if opts.fault is None:
        return
    kind, _, target = opts.fault.partition(":")
    if int(target) != rank or kind.startswith("pair-"):
        return
    if kind == "die":
        os._exit(17)
    while True:  # hang: never reach the next receive
        time.sleep(3600)


def _measure_table(rm: ReplayModel, device: torch.device, recompute: str, link: str) -> Any:
    """A cost table measured here, for a re-prediction (every rank measures at once, see
    ``planner.replay.costs``), with the layers recomputing as the replayed plan's do and, with
    the emulated link, exchanging through a zero-time one ([Note: link path] there)."""
    from profiler.comm import p2p_cost
    from profiler.layers.program import EmulatedLink

    zero = EmulatedLink(seconds={})
    table = measure_layer_costs(rm, device, Clock(device), label=dev.device_label(device), recompute=recompute,
                                ep_group=(lambda k: zero) if link == "emulated" else None)
    if dist.get_world_size() > 1:
        nbytes = rm.microbatch_size * rm.seq_len * rm.spec.hidden * 4
        table = replace(table, p2p=p2p_cost(device=device, nbytes=nbytes))
    return table


def recompute_mode(plan: Plan) -> str:
    """The plan's recomputation mode (none when the plan does not say)."""
    mode = plan.cluster.settings.recompute or "none"
    return "none" if mode == "auto" else str(mode)


def _ep_group(plan: Plan, rm: ReplayModel, opts: ReplayOptions, layout: Layout) -> Any:
    """What MoE layers exchange over: an emulated link, the EP group, or nothing."""
    if opts.link == "emulated":
        return emulated_links(plan, rm, scale=opts.link_scale)
    return layout.ep_group


def whole_backward_chunks(plan: Plan) -> dict[int, frozenset[int]]:
    """Per stage, the microbatches whose backward there is one full B, never I or W
    (``TimedStage`` keeps their graph whole: [Note: whole B] in ``planner.replay.timing``)."""
    full: dict[int, set[int]] = {}
    split: dict[int, set[int]] = {}
    for actions in plan.parsed_schedule().values():
        for act in actions:
            for part in act.parts:
                if part.kind == ActionKind.B:
                    full.setdefault(part.stage, set()).add(part.microbatch)
                elif part.kind in (ActionKind.I, ActionKind.W):
                    split.setdefault(part.stage, set()).add(part.microbatch)
    return {s: frozenset(m - split.get(s, set())) for s, m in full.items()}


def _build(plan: Plan, rm: ReplayModel, layout: Layout, device: torch.device, recorder: Recorder,
           opts: ReplayOptions):
    from planner.runtime import apply_recompute

    mods, stages = [], []
    group = _ep_group(plan, rm, opts, layout)
    whole = whole_backward_chunks(plan)
    if opts.torch_profile:  # every backward layer by layer, so each layer's B is a range of its own
        whole = {}
    for s, ((a, b), r) in enumerate(zip(plan.bounds(), plan.ranks())):
        if r == layout.pp_rank:
            mod = build_stage(rm, a, b, device, ep_group=group)
            apply_recompute(list(mod.layers.values()), recompute_mode(plan))
            if opts.torch_profile:
                label_stage(mod, rm.spec)
            mods.append(mod)
            stages.append(TimedStage(mod, s, plan.num_stages, device, group=layout.pp_group,
                                     recorder=recorder, whole_backward=whole.get(s, frozenset())))
    runtime = TimedRuntime(stages, plan.num_microbatches, loss_fn=loss_fn, scale_grads=True,
                           recorder=recorder)
    runtime._prepare_schedule_with_comms(to_torch_actions(plan.parsed_schedule()))
    attach_timed(runtime, recorder, opts, layout.rank)
    return mods, runtime


def _step(runtime: TimedRuntime, rank_args: tuple, target: torch.Tensor, mods: list) -> list:
    for m in mods:
        m.zero_grad(set_to_none=True)
    losses: list = []
    runtime.step(*rank_args, target=target, losses=losses)
    return [float(x.detach()) for x in losses]


def _memory(device: torch.device, baseline: int, peak: int) -> dict[str, Any]:
    if device.type == "cuda":
        return {"peak_bytes": peak, "above_baseline_bytes": peak - baseline, "comparable": True,
                "label": "torch.cuda.max_memory_allocated during the timed steps"}
    return {"peak_bytes": peak, "above_baseline_bytes": peak - baseline, "comparable": False,
            "label": "process RSS high-water mark during the timed steps (includes the Python "
                     "and torch runtime; not comparable with the planner's model of GPU memory)"}


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        dev.reset_peak_rss()


def _read_peak(device: torch.device) -> int:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else dev.peak_rss_bytes()


@dataclass
class _Run:
    """One plan on this rank: its stages, runtime, data and what its steps measured."""

    plan: Plan
    rm: ReplayModel
    mods: list
    runtime: TimedRuntime
    recorder: Recorder
    rank_args: tuple
    target: torch.Tensor
    table_key: tuple | None
    """Key of its cost table measured here (``tables``), None for an exact replay."""
    pairs_key: tuple | None = None
    """Key of its fused pairs measured here (``tables``), None when none are
    ([Note: pairs measured here] in ``planner.replay.costs``)."""
    table: Any = None
    """The re-prediction's table, set after the timed steps ([Note: table around the steps])."""
    opts: ReplayOptions | None = None
    """The options with the emulated link's scale set for this plan (``link_options``)."""
    steps: list = field(default_factory=list)
    peak: int = 0


def _timed_step(run: _Run, device: torch.device, opts: ReplayOptions, backend: str) -> None:
    """One timed step of ``run``: zero gradients, barrier, step; spans relative to the step's
    start. ``base_s`` is that start on the machine-wide monotonic clock (CPU; None on GPU),
    so the ranks' timelines can be put side by side (``planner.replay.measure``)."""
    clock = run.recorder.clock
    for m in run.mods:
        m.zero_grad(set_to_none=True)
    _barrier(backend, opts.timeout_s)
    _reset_peak(device)
    with collector_off():  # [Note: manual gc]
        run.recorder.begin_step()
        run.runtime.step(*run.rank_args, target=run.target)
        end = clock.mark()
    run.peak = max(run.peak, _read_peak(device))
    run.steps.append({"step_s": clock.seconds(run.recorder.base, end),
                      "base_s": None if clock.cuda else run.recorder.base,
                      "spans": [(s.stage, s.kind, s.microbatch, s.start, s.end) for s in run.recorder.spans()]})


def _grads(mods: list) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().cpu().clone() for m in mods for n, p in m.named_parameters()
            if p.grad is not None}


def run_rank(plans_data: list[dict], opts: ReplayOptions, *, rank: int, world_size: int, local_rank: int,
             init_method: str | None = None) -> list[dict[str, Any]] | None:
    """Replay the plans on this rank, their steps interleaved; rank 0 returns the report
    pieces of each plan, the others None. Joins a process group at ``init_method`` and
    destroys it at the end, unless this process already joined one: then the replay runs
    on that one and leaves it alive ([Note: launcher's group])."""
    if dist.is_initialized():
        return _run_in_group(plans_data, opts, local_rank=local_rank)
    device, backend = dev.pick_device(local_rank)
    binding = "not bound: GPU ranks"
    if device.type == "cpu" and opts.bind_cores:  # before any thread starts ([Note: core binding])
        binding = bind_rank(local_rank, _local_world(world_size), _threads(opts, world_size))
    elif device.type == "cpu":
        binding = "not bound (--no-bind-cores)"
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=opts.timeout_s))
    try:
        if device.type == "cpu":
            torch.set_num_threads(_threads(opts, world_size))
        plans = [Plan.from_dict(p) for p in plans_data]
        layout = make_layout(plans[0].pp, world_size // plans[0].pp, rank)
        return _replay(plans, opts, layout, device, backend, binding)
    finally:
        dist.destroy_process_group()


def _run_in_group(plans_data: list[dict], opts: ReplayOptions, *, local_rank: int) -> list[dict[str, Any]] | None:
    """[Note: launcher's group] A launcher (torchrun with a Megatron-style script) joined the
    default process group before calling the replay: every process of it is a replay rank,
    its backend decides the device (gloo: CPU), its timeout bounds the collectives (the
    replay's ``--timeout`` still bounds its barriers), and the replay leaves behind what the
    launcher had: the group alive (the expert-parallel and pipeline groups it made itself
    destroyed) and no core binding (threads of the group already run). The torch thread
    count stays at the replay's: rank 0's single-process reference must run at the same
    count to reproduce the replay's arithmetic, so ``launch`` restores it after the report."""
    rank, world_size, backend = dist.get_rank(), dist.get_world_size(), dist.get_backend()
    device = torch.device("cpu") if backend == "gloo" else dev.pick_device(local_rank)[0]
    if device.type == "cpu":
        torch.set_num_threads(_threads(opts, world_size))
    plans = [Plan.from_dict(p) for p in plans_data]
    layout = make_layout(plans[0].pp, world_size // plans[0].pp, rank)
    try:
        return _replay(plans, opts, layout, device, backend, "not bound: the launcher's process")
    finally:
        release_layout(layout)


def _prepare(plan: Plan, opts: ReplayOptions, layout: Layout, device: torch.device, tables: dict) -> _Run:
    scale, seq = resolve_shape(plan, opts)
    rm = replay_model(plan, scale=scale, seq_len=seq, seed=opts.seed, ep=layout.ep,
                      moe_capacity=opts.moe_capacity(plan), modules=opts.modules)
    key = pairs_key = None
    if not _exact(plan, rm, device, opts.link):  # every rank takes the same branches: same plans everywhere
        key = (rm.spec.name, rm.scale, rm.seq_len, rm.microbatch_size, recompute_mode(plan))
        if key not in tables:
            tables[key] = _measure_table(rm, device, recompute_mode(plan), opts.link)
        opts = link_options(opts, tables[key], plan, rm)  # [Note: link share] in planner.replay.costs
        pairs_key = _pairs_key(plan, rm, opts, key)
        if pairs_key is not None and pairs_key not in tables:
            tables[pairs_key] = _measure_pairs(plan, rm, opts, layout, device, pairs_key)
    recorder = Recorder(Clock(device))
    mods, runtime = _build(plan, rm, layout, device, recorder, opts)
    ids, target = make_batch(rm, device, ep_rank=layout.ep_rank)
    rank_args = (ids,) if plan.ranks()[0] == layout.pp_rank else ()
    return _Run(plan=plan, rm=rm, mods=mods, runtime=runtime, recorder=recorder, rank_args=rank_args,
                target=target, table_key=key, pairs_key=pairs_key, opts=opts)


def _pairs_key(plan: Plan, rm: ReplayModel, opts: ReplayOptions, key: tuple) -> tuple | None:
    """Key of the plan's fused pair types to measure here: only with the emulated link (with
    every expert local a pair has no all-to-all to hide, ``planner.replay.costs``)."""
    pairs = fused_type_pairs(plan, rm) if opts.link == "emulated" else []
    # the link's times follow from the plan's cluster and parallelism (``planner.replay.costs``)
    link = json.dumps([plan.cluster.to_dict(), plan.parallel, plan.costs], sort_keys=True, default=str)
    return ("pairs", *key, opts.link_scale, link, tuple(pairs)) if pairs else None


def _measure_pairs(plan: Plan, rm: ReplayModel, opts: ReplayOptions, layout: Layout, device: torch.device,
                   pairs_key: tuple) -> dict:
    return measure_hidden(rm, list(pairs_key[-1]), device, Clock(device), link=_ep_group(plan, rm, opts, layout),
                          recompute=recompute_mode(plan))


def _table_for(run: _Run, before: Any, after: Any, opts: ReplayOptions, hidden: dict | None = None) -> Any:
    """[Note: table around the steps] The re-prediction's table: the mean of the layer times
    measured before and after the timed steps (a shared machine's load drifts during a
    replay; both are measured apart from the steps, whose times never enter it), plus the
    emulated link ([Note: re-prediction with the link] in ``planner.replay.costs``)."""
    layers = tuple(replace(a, f=(a.f + b.f) / 2, i=(a.i + b.i) / 2, w=(a.w + b.w) / 2,
                           b=None if a.b is None else (a.b + b.b) / 2) for a, b in zip(before.layers, after.layers))
    drift = {}
    for a, b in zip(before.layers, after.layers):
        drift.setdefault(a.type, [a.f + a.b, b.f + b.b] if a.b is not None else [a.f + a.i, b.f + b.i])
    table = replace(before, layers=layers, meta={**before.meta, "measured": "mean of before and after the timed steps",
                                                 "f_plus_b_before_after_s": drift})
    if opts.link == "emulated":
        from planner.replay.costs import link_table

        table = link_table(table, run.plan, run.rm, scale=opts.link_scale, hidden=hidden)
    return table


def _exact(plan: Plan, rm: ReplayModel, device: torch.device, link: str) -> bool:
    from planner.replay.predict import is_exact_replay

    return is_exact_replay(plan, device=dev.device_label(device), scale=rm.scale, seq_len=rm.seq_len, link=link)


def _replay(plans: list[Plan], opts: ReplayOptions, layout: Layout, device: torch.device,
            backend: str, binding: str) -> list[dict[str, Any]] | None:
    """Build every plan, one gradient-check step each, warm-up, then the timed steps in
    rounds (plan 1, plan 2, ..., plan 1, ...) so that drift on a shared machine hits
    every plan alike."""
    baseline = dev.rss_bytes() if device.type == "cpu" else torch.cuda.memory_allocated(device)
    tables: dict = {}
    rank = layout.rank
    runs = [_prepare(p, opts, layout, device, tables) for p in plans]
    _inject(opts, rank)
    firsts = []
    for run in runs:
        losses = _step(run.runtime, run.rank_args, run.target, run.mods)
        if opts.grad_check:
            sync_gradients(run.mods, layout)
        firsts.append((losses, _grads(run.mods) if opts.grad_check else {}))
    for _ in range(opts.warmup):
        for run in runs:
            _step(run.runtime, run.rank_args, run.target, run.mods)
    freeze_setup()  # [Note: manual gc] in profiler.timing
    rm0 = runs[0].rm
    run_shape = {"model": str(runs[0].plan.model["name"]), "scale": rm0.scale, "seq_len": rm0.seq_len,
                 "micro_batch": rm0.microbatch_size, "pp": runs[0].plan.pp, "ep": rm0.ep, "rank": rank}
    with torch_profile(opts.torch_profile, rank, run_shape) as profiler_step:
        for _ in range(opts.steps):
            profiler_step()
            for run in runs:
                _timed_step(run, device, opts, backend)
        profiler_step()  # the last ProfilerStep holds no timed step (the importer drops it)
    after = {key: _measure_table(run.rm, device, key[-1], opts.link) for key, run in
             {r.table_key: r for r in runs if r.table_key is not None}.items()}
    after.update({key: _measure_pairs(run.plan, run.rm, run.opts, layout, device, key) for key, run in
                  {r.pairs_key: r for r in runs if r.pairs_key is not None}.items()})
    for run in runs:
        if run.table_key is not None:
            hidden = None if run.pairs_key is None else \
                {p: (s + after[run.pairs_key][p]) / 2 for p, s in tables[run.pairs_key].items()}
            run.table = _table_for(run, tables[run.table_key], after[run.table_key], run.opts, hidden)
    mine = [{"rank": rank, "steps": run.steps, "memory": _memory(device, baseline, run.peak), "losses": losses,
             "grads": grads, "threads": torch.get_num_threads(), "binding": binding} for run, (losses, grads) in zip(runs, firsts)]
    gathered: list[Any] = [None] * dist.get_world_size() if rank == 0 else []
    dist.gather_object(mine, gathered if rank == 0 else None, dst=0)
    if rank != 0:
        return None
    gathered = merge_ranks(gathered, layout.ep)
    return [{"ranks": [g[j] for g in gathered], "ep": layout.ep, "table": run.table, "rm": run.rm,
             "device": dev.device_label(device), "torch_device": device, "backend": backend}
            for j, run in enumerate(runs)]
