"""LayerRun's F / I / W tasks on a segment whose output the segment itself saved."""

from __future__ import annotations

import torch

from profiler.layers.program import Compute
from profiler.measure_run import LayerRun


def _program(w1: torch.nn.Parameter, w2: torch.nn.Parameter):
    def seg(s, c):
        x1 = s["x"] * w1                      # a segment output ...
        # ... saved inside the segment by a node that also makes w2's gradient (CPU's
        # native layer_norm, like CUDA's fused rms_norm that broke the W task on an H200)
        return {"x1": x1, "y": torch.nn.functional.layer_norm(x1, (4,), w2)}
    return (Compute(name="layer", fn=seg, inputs=("x",)),)


def test_weight_task_runs_when_an_output_is_saved_inside_its_segment():
    torch.manual_seed(0)
    w1, w2 = torch.nn.Parameter(torch.randn(4)), torch.nn.Parameter(torch.randn(4))
    x = torch.randn(3, 4)
    run = LayerRun(_program(w1, w2), x, [w1, w2])
    for task in run.forward_tasks():
        task.run()
    grad_y, grad_x1 = torch.randn(3, 4), torch.randn(3, 4)
    tasks = run.backward_tasks(grad_y)
    run.grads["x1"] = grad_x1
    for task in tasks:
        task.run()
    for task in run.weight_tasks():
        task.run()
    ref1, ref2 = w1.detach().clone().requires_grad_(), w2.detach().clone().requires_grad_()
    x1 = x * ref1
    torch.autograd.backward([x1, torch.nn.functional.layer_norm(x1, (4,), ref2)], [grad_x1, grad_y])
    assert torch.allclose(w1.grad, ref1.grad) and torch.allclose(w2.grad, ref2.grad)


def test_the_token_counts_exchange_is_timed_as_all_to_all_not_as_compute():
    """An MoE layer's token-count exchange is a step of its own (``moe_steps``): its wait is
    all-to-all time. Inside the router's compute segment (as it was) a rank that waited
    for its peer charged the wait to its forward compute: ``ppplan profile --ep 2`` on a
    CPU timed Qwen3-30B-A3B's MoE forward at 26-80 ms against 3.5 ms at ep 1. Here the
    emulated link holds the counts 50 ms: all of it must land in the all-to-all."""
    from planner.core.hf_config import load_model
    from profiler.layers import build_layer, layer_input
    from profiler.layers.program import EmulatedLink, Exchange
    from profiler.measure import measure_layer
    from profiler.timing import Clock

    model = load_model("qwen3-30b-a3b")
    layer = next(lay for lay in model.layers if lay.role == "decoder")
    link = EmulatedLink(seconds={"counts": 0.05})
    module = build_layer(model, layer, scale=0.03, ep_group=link)
    steps = module.program()
    assert [s.name for s in steps if isinstance(s, Exchange)] == ["counts", "dispatch", "combine"]
    x = layer_input(model, layer, scale=0.03, batch=1, seq_len=16)
    timing = measure_layer(module, x, clock=Clock(torch.device("cpu")), warmup=1, repeats=3)
    assert timing.a2a_f.median >= 0.05 and timing.f.median < 0.05
    assert timing.a2a_b.median < 0.05  # integer counts send no gradient back
