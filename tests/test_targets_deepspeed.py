"""``--target deepspeed`` plans run in DeepSpeed's own ``PipelineModule`` (pip install deepspeed,
DS_BUILD_OPS=0): the exported subclass, built on 2 gloo processes, owns the plan's layers on each
stage and checkpoints activations when the plan recomputes."""

from __future__ import annotations

import pytest

from deepspeed_ranks import run_two_ranks
from planner.api import plan as api_plan
from planner.export import ExportError, export_plan

pytest.importorskip("deepspeed", reason="deepspeed not installed (DS_BUILD_OPS=0 pip install deepspeed)")


def _build(rank: int, source: str, num_layers: int) -> tuple:
    import torch.nn as nn
    from deepspeed.pipe import LayerSpec

    scope: dict = {}
    exec(compile(source, "deepspeed_pipeline.py", "exec"), scope)  # the exported file, as written
    module = scope["PlannedPipelineModule"]([LayerSpec(nn.Linear, 4, 4) for _ in range(num_layers)],
                                           num_stages=2)
    return (list(module.parts), module._local_start, module._local_stop,
            module.activation_checkpoint_interval, len(module.forward_funcs))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_deepspeed_pipeline_module_takes_the_plan(tmp_path, recompute="full", interval=1):
    plan = api_plan("llama3-8b", pp=2, target="deepspeed", recompute=recompute, work=2.0)
    exported = export_plan(plan, "deepspeed", out=tmp_path / "ds.py")
    source = exported.files[str(tmp_path / "ds.py")]
    parts = exported.summary["parts"]
    assert exported.summary["activation_checkpoint_interval"] == interval
    got = run_two_ranks(_build, source, parts[-1])
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
