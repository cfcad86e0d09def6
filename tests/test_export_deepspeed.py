"""A real DeepSpeed ``train_batch`` of the exported pipeline: 2 gloo processes on 127.0.0.1, CPU.

The exported file (``PlannedPipelineModule``, ``DEEPSPEED_CONFIG``) builds DeepSpeed's own
``PipelineEngine`` (``deepspeed.initialize``) over a tiny model with one layer per plan layer;
one ``train_batch`` runs the plan's microbatches through DeepSpeed's 1F1B ``TrainSchedule``
with real sends, receives and backward. Each layer records the forwards it ran, so each stage
is seen to have run exactly the plan's layers, every microbatch (twice with full
recomputation: ``activation_checkpoint_interval`` 1 reruns each forward in the backward).

The two ranks run through ``deepspeed_ranks.run_two_ranks`` ([Note: DeepSpeed CPU comm op]
there: no DeepSpeed op is compiled; the optimizer is a torch one, so no CPU Adam op either).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from deepspeed_ranks import run_two_ranks
from planner.api import plan as api_plan
from planner.export import export_plan

pytest.importorskip("deepspeed", reason="deepspeed not installed (DS_BUILD_OPS=0 pip install deepspeed)")

WIDTH = 8


class _Tagged(nn.Linear):
    """A linear layer that records its plan index each time its forward runs."""

    def __init__(self, index: int, ran: list[int]) -> None:
        super().__init__(WIDTH, WIDTH)
        self.index, self.ran = index, ran

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ran.append(self.index)
        return super().forward(x).tanh()


def _train_one_batch(rank: int, source: str, num_layers: int) -> dict:
    import deepspeed
    import torch.nn.functional as F
    from deepspeed.pipe import LayerSpec

    scope: dict = {}
    exec(compile(source, "deepspeed_pipeline.py", "exec"), scope)  # the exported file, as written
    ran: list[int] = []
    torch.manual_seed(0)
    specs = [LayerSpec(_Tagged, i, ran) for i in range(num_layers)]
    module = scope["PlannedPipelineModule"](specs, num_stages=scope["NUM_STAGES"], loss_fn=F.mse_loss)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
    config = {**scope["DEEPSPEED_CONFIG"], "steps_per_print": 10 ** 9}
    engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=config)
    size = config["train_micro_batch_size_per_gpu"]
    batches = iter([(torch.randn(size, WIDTH), torch.zeros(size, WIDTH))
                    for _ in range(config["gradient_accumulation_steps"])])
    loss = engine.train_batch(data_iter=batches)
    return {"ran": ran, "loss": float(loss), "stage": engine.stage_id,
            "microbatches": engine.micro_batches}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("recompute, forwards", [("full", 2), ("none", 1)])
def test_deepspeed_train_batch_runs_the_plans_stages(tmp_path, recompute, forwards):
    plan = api_plan("llama3-8b", pp=2, target="deepspeed", recompute=recompute, work=1.0)
    exported = export_plan(plan, "deepspeed", out=tmp_path / "ds.py")
    source, parts = exported.files[str(tmp_path / "ds.py")], exported.summary["parts"]
    got = run_two_ranks(_train_one_batch, source, parts[-1])
    for rank in range(2):
        assert not isinstance(got[rank], str), got[rank]
        out = got[rank]
        assert out["stage"] == rank and out["microbatches"] == plan.num_microbatches
        mine = list(range(parts[rank], parts[rank + 1]))
        assert sorted(set(out["ran"])) == mine
        assert all(out["ran"].count(i) == forwards * plan.num_microbatches for i in mine)
    assert got[1]["loss"] == got[1]["loss"] and got[1]["loss"] > 0  # the last stage computed a loss
