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
