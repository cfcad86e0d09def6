"""Run one layer program on one microbatch segment by segment, as schedulable tasks.

The autograd graph is cut at every step of the program (``profiler.layers.program``):
each compute segment's inputs become fresh leaves, and ``LayerRun`` makes forward, I, W
(or full-backward B) tasks of the pieces between communications: the F / I / W split
``torch.distributed.pipelining`` makes for a stage. All-to-alls are started with
``async_op=True``; a task list is run either alone (``run_serial``: each task waited on
and timed) or interleaved with another (``profiler.pairs``). On a GPU the same code runs
with NCCL, whose collectives run on their own stream; ``work.wait()`` orders the compute
stream after them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from profiler.layers.program import Compute, Exchange, State, Step, all_to_all
from profiler.timing import Clock

__all__ = ["Task", "LayerRun", "run_serial", "takes_gradient"]


@dataclass(frozen=True, kw_only=True)
class Task:
    """One piece of work of one layer: a compute segment or an all-to-all."""

    name: str
    """Step name (attn, experts, post, dispatch, combine, ...)."""
    comm: bool
    """True for an all-to-all (``run`` returns something with ``wait()``)."""
    expert: bool
    """Routed-expert compute (scales with routing imbalance)."""
    run: Callable[[], Any]
    """Starts the work; compute finishes on return."""


class _Pending:
    """An in-flight all-to-all; ``wait()`` stores the result in the state."""

    def __init__(self, work: Any, store: Callable[[], None]) -> None:
        self.work, self.store = work, store

    def wait(self) -> None:
        if self.work is not None:
            self.work.wait()
        self.store()


def takes_gradient(t: torch.Tensor) -> bool:
    """Whether a layer input gets a gradient: floating tensors do, token ids do not (so
    torch's first stage runs no I)."""
    return t.is_floating_point()


def _leaf(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return t.requires_grad_(True) if takes_gradient(t) else t


class LayerRun:
    """One layer on one microbatch: forward, input-gradient and weight-gradient tasks.

    Forward tasks run the segments and start the all-to-alls; input-gradient (I) tasks run
    torch's own ``stage_backward_input`` per segment (``torch.autograd.grad`` w.r.t. the
    segment inputs, keeping the graph and the gradients of the intermediates the weights
    need) and send gradients back through the all-to-alls with split sizes reversed;
    weight-gradient (W) tasks run ``stage_backward_weight`` per segment; a full backward B
    is one ``torch.autograd.backward`` per segment (``backward_tasks(full=True)``). A segment
    whose inputs need no gradient (the embedding's token ids) does nothing in I and its
    whole backward in W, as torch does on stage 0.
    """

    def __init__(self, steps: tuple[Step, ...], x: torch.Tensor, params: list[torch.nn.Parameter],
                 *, loss: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        self.steps, self.params, self.loss = steps, params, loss
        self.state: State = {"x": x}
        self.grads: State = {}
        self.ctx: dict[str, Any] = {}
        self.leaves: dict[int, State] = {}
        self.outputs: dict[int, State] = {}
        self.param_groups: dict[int, Any] = {}

    # -- forward ---------------------------------------------------------------
    def forward_tasks(self) -> list[Task]:
        """Tasks of the forward, in order (the head's loss is part of its last segment)."""
        return [self._forward_task(k, step) for k, step in enumerate(self.steps)]

    def _forward_task(self, k: int, step: Step) -> Task:
        if isinstance(step, Exchange):
            def start() -> _Pending:
                in_s, out_s = self.ctx[step.splits]
                out, work = all_to_all(self.state[step.src].detach(), in_s, out_s, step.group, async_op=True,
                                       name=step.name)
                return _Pending(work, lambda: self.state.__setitem__(step.dst, out))
            return Task(name=step.name, comm=True, expert=False, run=start)

        def compute() -> None:
            leaves = {name: _leaf(self.state[name]) for name in step.inputs}
            out = step.fn(leaves, self.ctx)
            if self.loss is not None and k == len(self.steps) - 1:
                out = {**out, "loss": self.loss(out["y"])}
            self.leaves[k], self.outputs[k] = leaves, out
            self.state.update(out)
        return Task(name=step.name, comm=False, expert=step.expert, run=compute)

    # -- backward --------------------------------------------------------------
    def backward_tasks(self, grad_y: torch.Tensor | None, *, full: bool = False) -> list[Task]:
        """Input-gradient tasks in reverse step order; ``grad_y`` seeds the output
        (ignored for a layer with a loss, whose gradient seed is 1). ``full``: each
        compute segment runs its whole backward (input and weight gradients) in one
        autograd pass, as torch's runtime does for a full backward B; no W tasks follow."""
        if self.loss is not None:
            self.grads["loss"] = torch.ones_like(self.state["loss"])
        else:
            self.grads["y"] = grad_y
        return [self._input_task(k, step, full) for k, step in reversed(list(enumerate(self.steps)))
                if not (isinstance(step, Exchange) and not step.differentiable)]

    def _input_task(self, k: int, step: Step, full: bool = False) -> Task:
        if isinstance(step, Exchange):
            def start() -> _Pending:
                in_s, out_s = self.ctx[step.splits]
                g, work = all_to_all(self.grads[step.dst], out_s, in_s, step.group, async_op=True,
                                     name=f"{step.name}.grad")
                return _Pending(work, lambda: self.grads.__setitem__(step.src, g))
            return Task(name=step.name, comm=True, expert=False, run=start)

        def compute() -> None:
            names = [n for n, t in self.outputs[k].items() if n in self.grads and t.requires_grad]
            if full:
                self._full_backward(k, names)
                return
            # [Note: fresh outputs] torch's stage_backward_input ends with ``t.detach_()`` on
            # each output it is given. A segment output can also be an input the segment
            # itself saved for its weight gradient (x1 feeds norm2: CUDA's fused rms_norm
            # saves its input for the weight gradient), and the W task then fails with
            # "Trying to use a saved tensor that has been detached in-place" (seen on an
            # H200, torch 2.11; CPU's native layer_norm does the same: tests/test_measure_run.py).
            # So hand torch a copy of each output, joined to the graph by
            # CloneBackward (which saves nothing): one elementwise pass per output.
            leaves = self.leaves[k]
            inputs = [leaves[n] for n in leaves]
            if not any(t.requires_grad for t in inputs):
                self.param_groups[k] = (None, names)  # nothing to do until W
                return
            outs = [self.outputs[k][n].clone() for n in names]
            dinputs, groups = stage_backward_input(outs, [self.grads[n] for n in names], inputs,
                                                   iter(self.params))
            self.param_groups[k] = (groups, names)
            for name, g in zip(leaves, dinputs):
                if g is not None:
                    self.grads[name] = self.grads[name] + g if name in self.grads else g
        return Task(name=step.name, comm=False, expert=step.expert, run=compute)

    def _full_backward(self, k: int, names: list[str]) -> None:
        """One autograd pass through segment ``k`` (torch's ``stage_backward`` is
        ``torch.autograd.backward`` over the stage output): weight gradients accumulate,
        the segment's leaves receive their input gradients."""
        torch.autograd.backward([self.outputs[k][n] for n in names], [self.grads[n] for n in names])
        for name, leaf in self.leaves[k].items():
            if leaf.grad is not None:
                self.grads[name] = self.grads[name] + leaf.grad if name in self.grads else leaf.grad

    def weight_tasks(self) -> list[Task]:
        """Weight-gradient tasks, one per compute segment (after ``backward_tasks`` ran)."""
        return [Task(name=step.name, comm=False, expert=step.expert,
                     run=lambda k=k: self._weight(k))
                for k, step in reversed(list(enumerate(self.steps))) if isinstance(step, Compute)]

    def _weight(self, k: int) -> None:
        groups, names = self.param_groups.pop(k)
        if groups is not None:  # groups whose intermediates got no gradient have nothing to do
            stage_backward_weight(iter(self.params), [g for g in groups if "grads" in g])
        elif names:  # no input gradient (token ids): the whole backward is weight-gradient
            torch.autograd.backward([self.outputs[k][n] for n in names],
                                    [self.grads[n] for n in names])

def run_serial(tasks: list[Task], clock: Clock) -> list[tuple[Task, float]]:
    """Run tasks one after another, waiting for each all-to-all; (task, seconds) each."""
    marks = []
    for task in tasks:
        start = clock.mark()
        pending = task.run()
        if task.comm:
            pending.wait()
        marks.append((task, start, clock.mark()))
    clock.sync()
    return [(task, clock.elapsed(a, b)) for task, a, b in marks]
