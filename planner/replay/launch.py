"""Starting the ranks of a replay: local processes, the ones ``torchrun`` started, or the
launcher's own process group (the three ways are described below).
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import signal
import time
import traceback
from typing import Any

import torch.multiprocessing as mp

from planner.core.errors import InputError
from planner.core.plan import Plan
from planner.replay.lowering import check_plan
from planner.replay.options import ReplayFailed, ReplayOptions, ReplayResult
from profiler.measure_launch import free_port

__all__ = ["replay", "replay_interleaved", "under_torchrun"]

# Starting the ranks of a replay: local processes, or the ones ``torchrun`` started.
#
# Local (the default): one process per pipeline rank and expert-parallel rank, pp x ep
# (``--ep``; see ``planner.replay.lowering``) (``torch.multiprocessing`` spawn),
# rendezvous on 127.0.0.1 at a free port. The parent watches them: when one exits
# with an error it stops all the others at once; when none has answered by the
# deadline it stops them all; either way it raises ``ReplayFailed`` naming the rank.
# Children also ask the kernel to kill them if the parent dies (Linux
# ``PR_SET_PDEATHSIG``), so no rank outlives its launcher.
#
# Under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` set): this process is one rank;
# ``env://`` rendezvous; rank 0 gets the result, the others None.
#
# In a process group the caller already joined (a Megatron-style launcher called
# ``init_process_group`` first): every process of that group is one rank, the replay
# runs on it and leaves it alive (``worker`` [Note: launcher's group]); rank 0 gets the
# result, the others None.

_POLL_S = 0.05
_GRACE_S = 5.0
_SETTLE_S = 10.0
"""After a rank reports an error, how long to wait for a rank that died silently (the cause);
generous because a loaded machine can take seconds to reap a dead process."""


def under_torchrun() -> bool:
    """Whether torchrun (or another env:// launcher) started this process."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def replay(plan: Plan, options: ReplayOptions | None = None) -> ReplayResult | None:
    """Replay ``plan``; returns the result on rank 0 (and in the local launcher), else None."""
    out = replay_interleaved([plan], options)
    return None if out is None else out[0]


def replay_interleaved(plans: list[Plan], options: ReplayOptions | None = None) -> list[ReplayResult] | None:
    """Replay several plans of one pipeline size in one launch, their steps alternating
    (see ``worker``); one result per plan on rank 0 (and in the local launcher), else None."""
    opts = (options or ReplayOptions()).check()
    ep = replay_ep(opts)
    joined = _joined_world()
    world = joined or (int(os.environ["WORLD_SIZE"]) if under_torchrun() else plans[0].pp * ep)
    if world % ep:
        raise InputError("WORLD_SIZE", f"torchrun started {world} processes, not pp x ep with --ep {ep}",
                         f"launch pp x {ep} processes, or pass the --ep that divides {world}")
    for plan in plans:
        plan.require_one_device("ppplan replay")
        check_plan(plan, world_size=world // ep)
        _check_experts(plan, opts, ep)
        _check_fits(plan, opts, len(plans))
    data = [p.to_dict() for p in plans]
    if joined is not None:
        return _in_joined_group(data, opts, joined)
    if under_torchrun():
        return _rank_main(data, opts, rank=int(os.environ["RANK"]), world_size=world,
                          local_rank=int(os.environ.get("LOCAL_RANK", 0)), init_method="env://")
    return _spawn(data, world, opts)


def _joined_world() -> int | None:
    """World size of the process group this process already joined, else None."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else None


def _in_joined_group(plans_data: list[dict], opts: ReplayOptions, world: int) -> list[ReplayResult] | None:
    """This rank's part of the replay in the caller's process group (``worker`` [Note:
    launcher's group]); the caller's torch thread count is back when it returns."""
    import torch
    import torch.distributed as dist

    rank, threads = dist.get_rank(), torch.get_num_threads()
    try:
        return _rank_main(plans_data, opts, rank=rank, world_size=world,
                          local_rank=int(os.environ.get("LOCAL_RANK", rank)), init_method=None)
    finally:
        torch.set_num_threads(threads)


def replay_ep(opts: ReplayOptions) -> int:
    """Expert-parallel processes per stage: ``--ep`` (default 1: every expert local, since
    a plan's EP usually needs more processes than the replaying machine has); 1 with the
    emulated link, whose all-to-alls stay in one process."""
    return 1 if opts.link == "emulated" else (opts.ep or 1)


def _check_experts(plan: Plan, opts: ReplayOptions, ep: int) -> None:
    """``--ep`` must divide the replayed model's expert count (one line, before any process)."""
    if ep == 1:
        return
    from planner.replay.lowering import replay_model
    from planner.replay.worker import resolve_shape

    scale, seq = resolve_shape(plan, opts)
    rm = replay_model(plan, scale=scale, seq_len=seq, ep=ep)
    if rm.spec.moe is None:
        raise InputError("--ep", f"{ep} but {rm.spec.name} has no experts", "replay with --ep 1")


def _check_fits(plan: Plan, opts: ReplayOptions, copies: int) -> None:
    from planner.replay.options import check_fits

    check_fits(plan, opts, copies=copies)


def _rank_main(plans_data: list[dict], opts: ReplayOptions, **where: Any) -> list[ReplayResult] | None:
    from planner.replay.report import assemble
    from planner.replay.worker import run_rank

    out = run_rank(plans_data, opts, **where)
    return None if out is None else [assemble(Plan.from_dict(p), opts, o) for p, o in zip(plans_data, out)]


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # the launcher died before the prctl above
        os._exit(1)


def _child(rank: int, world: int, port: int, plans_data: list[dict], opts: ReplayOptions, results: Any) -> None:
    _die_with_parent()
    # torch's _PipelineScheduleRuntime logs the whole rank x step grid at ERROR when an action
    # raises (torch/distributed/pipelining/schedules.py); this rank's failure reaches the user
    # as one line through the parent, so the grid stays out of the terminal
    logging.getLogger("torch.distributed.pipelining.schedules").setLevel(logging.CRITICAL)
    try:
        out = _rank_main(plans_data, opts, rank=rank, world_size=world, local_rank=rank,
                         init_method=f"tcp://127.0.0.1:{port}")
        if out is not None:
            results.put(("ok", rank, out))
    except BaseException as exc:  # report any failure of this rank to the parent, then exit non-zero
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        results.put(("error", rank, f"{type(exc).__name__}: {first}", traceback.format_exc()))
        raise SystemExit(1) from None
    # [Note: quiet exit] The step is done and the process group destroyed, but the
    # interpreter's own teardown can still abort the process ("terminate called without an
    # active exception": a native thread left joinable, signal 6; seen in about 1 of 25
    # 2-rank replays on this machine), and the parent reads a rank that dies before rank 0
    # reports as a failed replay. So flush this rank's result and leave without teardown.
    results.close()
    results.join_thread()
    os._exit(0)


def _spawn(plans_data: list[dict], world: int, opts: ReplayOptions) -> list[ReplayResult]:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(r, world, port, plans_data, opts, results),
                         daemon=True, name=f"ppplan-replay-rank{r}") for r in range(world)]
    for p in procs:
        p.start()
    pids = tuple(p.pid for p in procs if p.pid is not None)
    try:
        return _watch(procs, results, opts, pids)
    finally:
        _stop(procs)


def _watch(procs: list, results: Any, opts: ReplayOptions, pids: tuple[int, ...]) -> list[ReplayResult]:
    deadline = time.monotonic() + opts.deadline_s
    while time.monotonic() < deadline:
        try:
            msg = results.get(timeout=_POLL_S)
        except queue.Empty:
            msg = None
        if msg is not None and msg[0] == "ok":
            return msg[2]
        if msg is not None:
            raise ReplayFailed(_error_message(msg, procs, results, opts), pids=pids)
        dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if dead:
            raise ReplayFailed(_death_message(dead, procs, results, opts), pids=pids)
        if all(p.exitcode == 0 for p in procs):
            raise ReplayFailed("every rank exited without a result", pids=pids)
    raise ReplayFailed(f"no result within {opts.deadline_s:g} s (--deadline); ranks still running: "
                       f"{[r for r, p in enumerate(procs) if p.is_alive()]}", pids=pids)


def _reported_ranks(results: Any) -> set[int]:
    """Ranks with an error report still waiting in the queue."""
    out = set()
    while True:
        try:
            m = results.get(timeout=_POLL_S)
        except queue.Empty:
            return out
        if m[0] == "error":
            out.add(m[1])


def _error_message(msg: tuple, procs: list, results: Any, opts: ReplayOptions) -> str:
    """A rank raised; if another rank died silently first, that one is the cause."""
    end = time.monotonic() + _SETTLE_S
    while time.monotonic() < end and any(p.exitcode is None for r, p in enumerate(procs) if r != msg[1]):
        time.sleep(_POLL_S)
    reported = {msg[1]} | _reported_ranks(results)
    # a rank that exited non-zero without reporting an error died silently (exit code 1
    # included: a rank killed mid-collective can end with 1 and no report)
    silent = [(r, p.exitcode) for r, p in enumerate(procs)
              if p.exitcode not in (None, 0) and r not in reported]
    text = f"rank {msg[1]} failed: {msg[2]}"
    if silent:
        r, code = silent[0]
        return f"rank {r} died (exit code {code}); then {text}"
    if "timed out" in msg[2].lower() or "timeout" in msg[2].lower():
        text += f" (a rank stopped answering for --timeout {opts.timeout_s:g} s)"
    return text


def _death_message(dead: list[tuple[int, int]], procs: list, results: Any, opts: ReplayOptions) -> str:
    """A rank exited non-zero; if another rank's error report follows, word it as
    ``_error_message`` does (naming a rank that died without a report first)."""
    try:
        msg = results.get(timeout=1.0)
        if msg[0] == "error":
            return _error_message(msg, procs, results, opts)
    except queue.Empty:
        pass
    r, code = dead[0]
    how = f"signal {-code}" if code < 0 else f"exit code {code}"
    return f"rank {r} died ({how}) before finishing its step; the other ranks were stopped"


def _stop(procs: list) -> None:
    """Terminate every still-running rank, kill it if it ignores that, and reap it."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + _GRACE_S
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
