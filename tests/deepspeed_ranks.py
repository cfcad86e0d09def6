"""Two DeepSpeed ranks on 127.0.0.1 (gloo, CPU) for the tests that load an exported pipeline.

``run_two_ranks(work, source, num_layers)`` spawns two processes; each initialises DeepSpeed
(``init_deepspeed``) and returns ``work(rank, source, num_layers)`` (a module-level function,
so the spawned process can import it), or the repr of the exception it raised. The parent
kills a rank that has not ended 30 s after the results came back.

[Note: DeepSpeed CPU comm op] ``deepspeed.comm``'s ``TorchBackend`` JIT-compiles its
shared-memory all-reduce kernel (``deepspeed/comm/torch.py``, ``build_shm_op``: the
``ShareMemCommBuilder`` op, C++ with OpenMP) whenever DeepSpeed's compatibility table says the
op can be built: minutes on 2 busy cores, and a build killed midway leaves torch's extension
lock behind for the next run to wait on. ``DS_BUILD_OPS=0`` only affects installation.
DeepSpeed consults the table (``deepspeed.ops.__compatible_ops__``, probed once and cached in
the module so edits persist, ``deepspeed/ops/__init__.py``) before building; marking the op
incompatible makes ``build_shm_op`` return None and every collective go to torch's gloo.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from profiler.measure_launch import free_port

RESULT_TIMEOUT_S = 240
"""How long the parent waits for both ranks' results."""


def init_deepspeed(rank: int, port: int) -> None:
    """Join the two-rank gloo group as ``rank`` (the shared-memory op left unbuilt: module doc)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank), LOCAL_SIZE="2", DS_ACCELERATOR="cpu")
    import deepspeed
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # [Note: DeepSpeed CPU comm op]
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)


def _rank(work: Callable[[int, str, int], Any], rank: int, port: int, source: str, num_layers: int,
          queue) -> None:
    try:
        init_deepspeed(rank, port)
        queue.put((rank, work(rank, source, num_layers)))
    except Exception as exc:  # noqa: BLE001 - reported to the parent test
        queue.put((rank, repr(exc)))


def run_two_ranks(work: Callable[[int, str, int], Any], source: str, num_layers: int) -> dict[int, Any]:
    """rank -> what ``work`` returned there (a string: the exception it raised)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(work, r, port, source, num_layers, queue)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        return dict(queue.get(timeout=RESULT_TIMEOUT_S) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
