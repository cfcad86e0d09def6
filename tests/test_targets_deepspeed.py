"""``--target deepspeed`` plans run in DeepSpeed's own ``PipelineModule`` (pip install deepspeed,
DS_BUILD_OPS=0): the exported subclass, built on 2 gloo processes, owns the plan's layers on each
stage and checkpoints activations when the plan recomputes."""

from __future__ import annotations

import os

import pytest

from planner.api import plan as api_plan
from planner.export import ExportError, export_plan
from profiler.measure_launch import free_port

pytest.importorskip("deepspeed", reason="deepspeed not installed (DS_BUILD_OPS=0 pip install deepspeed)")


def _build(rank: int, port: int, source: str, num_layers: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank), LOCAL_SIZE="2")
    import importlib

    import deepspeed
    import torch.nn as nn
    from deepspeed.pipe import LayerSpec

    # DeepSpeed's CPU shared-memory all-reduce kernel is JIT-compiled with a C++ toolchain on first
    # use (minutes on 2 cores); PipelineModule never all-reduces, so it is left out
    # (``import deepspeed.comm.torch as m`` would bind pytorch itself: deepspeed.comm re-exports it)
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    scope: dict = {}
    exec(compile(source, "deepspeed_pipeline.py", "exec"), scope)  # the exported file, as written
    module = scope["PlannedPipelineModule"]([LayerSpec(nn.Linear, 4, 4) for _ in range(num_layers)],
                                           num_stages=2)
    out[rank] = (list(module.parts), module._local_start, module._local_stop,
                 module.activation_checkpoint_interval, len(module.forward_funcs))


def _run(rank: int, port: int, source: str, num_layers: int, queue) -> None:
    out: dict = {}
    try:
        _build(rank, port, source, num_layers, out)
        queue.put((rank, out[rank]))
    except Exception as exc:  # noqa: BLE001 - reported to the parent test
        queue.put((rank, repr(exc)))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_deepspeed_pipeline_module_takes_the_plan(tmp_path, recompute="full", interval=1):
    import torch.multiprocessing as mp

    plan = api_plan("llama3-8b", pp=2, target="deepspeed", recompute=recompute, work=2.0)
    exported = export_plan(plan, "deepspeed", out=tmp_path / "ds.py")
    source = exported.files[str(tmp_path / "ds.py")]
    parts = exported.summary["parts"]
    assert exported.summary["activation_checkpoint_interval"] == interval
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_run, args=(r, port, source, parts[-1], queue)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(queue.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    for rank in range(2):
        assert not isinstance(got[rank], str), got[rank]
        module_parts, start, stop, ckpt, n_local = got[rank]
        assert module_parts == parts
        assert (start, stop) == (parts[rank], parts[rank + 1])
        assert n_local == parts[rank + 1] - parts[rank]
        assert ckpt == interval


def test_plan_without_recompute_checkpoints_nothing():
    plan = api_plan("llama3-8b", pp=2, target="deepspeed", recompute="none", work=2.0)
    exported = export_plan(plan, "deepspeed")
    assert exported.summary["activation_checkpoint_interval"] == 0
    assert "ACTIVATION_CHECKPOINT_INTERVAL = 0" in exported.files["deepspeed_pipeline.py"]


def test_selective_recompute_is_refused_naming_the_target():
    plan = api_plan("llama3-8b", pp=2, recompute="selective", schedule="1f1b", work=2.0)
    with pytest.raises(ExportError, match=r"only checkpoints whole layers \(re-plan with --target deepspeed"):
        export_plan(plan, "deepspeed")


def test_deepspeed_target_refuses_selective_recompute_at_plan_time():
    from planner.core.errors import InputError

    with pytest.raises(InputError, match=r"--recompute: deepspeed has no selective recomputation"):
        api_plan("llama3-8b", pp=2, target="deepspeed", recompute="selective")
