"""Start the profiling processes, relay progress, collect rank 0's result, leave no orphans.

One process runs in-process (no group). More are started with the ``spawn`` method
(torch.multiprocessing context), a TCP rendezvous on 127.0.0.1 at a free port, and a
queue that carries progress lines, rank 0's result and any rank's error. If a rank
fails, the run times out or the parent is interrupted, every child is terminated
(then killed) and joined before the error propagates.
"""

from __future__ import annotations

import queue as queue_mod
import socket
import time
from typing import Any, Callable

import torch.multiprocessing as mp

from profiler.measure_worker import WorkerConfig, WorkerResult, profile_rank

__all__ = ["launch", "ProfilingError", "free_port"]


class ProfilingError(RuntimeError):
    """A profiling process failed or timed out."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a gloo/NCCL rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(rank: int, world: int, port: int, cfg: WorkerConfig, q: Any) -> None:
    import torch.distributed as dist

    def report(label: str) -> None:
        if rank == 0:
            q.put(("progress", rank, label))

    try:
        result = profile_rank(rank, world, port, cfg, report)
        q.put(("result", rank, result))
    except BaseException as exc:  # noqa: BLE001 - relayed to the parent as one line
        q.put(("error", rank, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(cfg: WorkerConfig, world: int, *, timeout_s: float,
           progress: Callable[[str], None] | None = None) -> WorkerResult:
    """Run ``profile_rank`` on ``world`` ranks and return rank 0's result."""
    progress = progress or (lambda label: None)
    if world == 1:
        return profile_rank(0, 1, 0, cfg, progress)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(r, world, port, cfg, q), daemon=True)
             for r in range(world)]
    ok = False
    try:
        for p in procs:
            p.start()
        result = _collect(q, procs, timeout_s, progress)
        ok = True
        return result
    finally:
        _stop(procs, grace_s=5.0 if ok else 0.0)


def _collect(q: Any, procs: list, timeout_s: float, progress: Callable[[str], None]) -> WorkerResult:
    deadline = time.monotonic() + timeout_s
    result, done = None, 0
    while done < len(procs):
        left = deadline - time.monotonic()
        if left <= 0:
            raise ProfilingError(f"profiling did not finish within {timeout_s:.0f} s")
        try:
            kind, rank, payload = q.get(timeout=min(left, 1.0))
        except queue_mod.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise ProfilingError(f"profiling process exited with code {dead[0].exitcode}") from None
            continue
        if kind == "progress":
            progress(payload)
        elif kind == "error":
            raise ProfilingError(f"rank {rank}: {payload}")
        else:
            done += 1
            result = payload if rank == 0 else result
    return result


def _stop(procs: list, *, grace_s: float) -> None:
    """Join children, terminating (then killing) any still alive after ``grace_s``."""
    for p in procs:
        p.join(timeout=grace_s)
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()
