"""Measure one layer: F, I, W and full backward B per segment, exposed all-to-all, memory.

``measure_layer`` times the layer's program (``profiler.measure_run``) segment by segment,
the full backward B included (one autograd pass per segment, ``planner.core.costs``
[Note: full backward]), and measures its saved-activation, parameter and output bytes on
a separate, untimed forward. ``time_layer_calls`` times a layer the other way, called
whole as torch's pipeline runtime calls a stage: what the replay's re-prediction needs,
since its stages run that way and not segment by segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import statistics

import torch
from torch import nn
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from profiler.layers.program import Exchange, group_rank
from profiler.measure_run import LayerRun, Task, run_serial, takes_gradient
from profiler.timing import Clock, Stat, collector_off, summarize

__all__ = ["LayerTiming", "measure_layer", "measure_layers", "LayerSampler", "saved_bytes", "grad_seed", "time_layer_calls", "Sample"]

Sample = Callable[[], tuple[torch.Tensor, torch.Tensor, "list[torch.Tensor] | None"]]
"""``() -> (input, output or loss, output gradients or None)``: one fresh forward of one
microbatch (``None`` gradients: the output is a loss, the root of the backward)."""


@dataclass(frozen=True, kw_only=True)
class LayerTiming:
    """Measured costs of one layer type on this rank, for one microbatch."""

    f: Stat
    """Forward compute (all segments)."""
    i: Stat
    """Input-gradient compute."""
    w: Stat
    """Weight-gradient compute."""
    b: Stat
    """Full backward compute (one autograd pass per segment, as torch runs B)."""
    a2a_f: Stat
    """Forward all-to-alls (dispatch + combine), waited on one by one."""
    a2a_b: Stat
    """Backward all-to-alls."""
    expert: tuple[float, float, float, float]
    """Median routed-expert part of (f, i, w, b)."""
    a2a_bytes: int
    """Bytes this rank sends to other ranks in the forward all-to-alls."""
    tokens_per_expert: tuple[int, ...]
    """This rank's token copies per global expert in the measured forward (empty if dense)."""
    act_bytes: int
    """Activation bytes saved for backward."""
    act_w_bytes: int
    """Saved bytes only the weight-gradient needs."""
    param_bytes: int
    """Parameter bytes on this rank."""
    out_bytes: int
    """Bytes of the layer's output activation."""


def grad_seed(y: torch.Tensor, seed: int) -> torch.Tensor:
    """Deterministic output gradient for backward of ``y``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(y.shape, generator=gen).to(device=y.device, dtype=y.dtype)


def _sums(timed: list[tuple[Task, float]]) -> tuple[float, float, float]:
    """(compute, expert compute, communication) seconds."""
    compute = sum(t for task, t in timed if not task.comm)
    expert = sum(t for task, t in timed if task.expert)
    comm = sum(t for task, t in timed if task.comm)
    return compute, expert, comm


def measure_layer(module: nn.Module, x: torch.Tensor, *, clock: Clock, warmup: int, repeats: int,
                  loss: Callable[[torch.Tensor], torch.Tensor] | None = None,
                  seed: int = 0) -> LayerTiming:
    """Time F, I and W of ``module`` on input ``x`` (see the module doc).

    Runs the layer's program ``warmup + repeats`` times on the same microbatch and keeps,
    per repeat, the sums over compute segments (all, and routed-expert only) and over
    all-to-alls, forward and backward; each repeat then runs one more forward, untimed,
    and times its full backward B (one autograd pass per segment). Memory comes from a
    separate, untimed forward: ``act_bytes``, distinct storages autograd saves for backward
    (``saved_tensors_hooks`` pack hook), parameters excluded, the layer input included when
    it is saved; ``act_w_bytes``, what only the weight-gradient needs (``saved_bytes``);
    ``param_bytes``, this rank's parameters; ``out_bytes``, the output activation.
    """
    one = {"layer": LayerSampler(module, x, loss=loss, seed=seed)}
    return measure_layers(one, clock=clock, warmup=warmup, repeats=repeats)["layer"]


def measure_layers(samplers: dict[str, "LayerSampler"], *, clock: Clock, warmup: int,
                   repeats: int, done: Callable[[str], None] = lambda t: None) -> dict[str, LayerTiming]:
    """``measure_layer`` of several layers, their repeats taken in rounds (one repeat of each
    layer per round) so that every layer's median spans the same stretch of the machine's
    state: a CPU's speed drifts in phases of a second or two (docs/trace-import.md), longer
    than one layer's consecutive repeats. Every rank runs the same order, so the all-to-alls
    of an expert-parallel group meet."""
    for t, sampler in samplers.items():
        for _ in range(warmup):
            sampler.sample(clock)
    rows: dict[str, list[tuple[float, ...]]] = {t: [] for t in samplers}
    for _ in range(repeats):
        for t, sampler in samplers.items():
            rows[t].append(sampler.sample(clock))
    out = {}
    for t, sampler in samplers.items():
        out[t] = sampler.timing(rows[t])
        done(t)
    return out


class LayerSampler:
    """One layer's repeats of ``measure_layer``: ``sample`` times one, ``timing`` sums them up."""

    def __init__(self, module: nn.Module, x: torch.Tensor, *,
                 loss: Callable[[torch.Tensor], torch.Tensor] | None = None, seed: int = 0) -> None:
        self.module, self.x, self.loss, self.seed = module, x, loss, seed
        self.params = list(module.parameters())
        self.run: LayerRun | None = None

    def sample(self, clock: Clock) -> tuple[float, ...]:
        """One repeat's F, I, W and B sums (``_sums``), gradients accumulating as a replay's do."""
        module, x, params, loss, seed = self.module, self.x, self.params, self.loss, self.seed
        accumulate_into(params)
        run = LayerRun(module.program(), x, params, loss=loss)
        fwd = run_serial(run.forward_tasks(), clock)
        bwd = run_serial(run.backward_tasks(grad_seed(run.state["y"], seed)), clock)
        wgt = run_serial(run.weight_tasks(), clock)
        full = LayerRun(module.program(), x, params, loss=loss)
        run_serial(full.forward_tasks(), clock)
        whole = run_serial(full.backward_tasks(grad_seed(full.state["y"], seed), full=True), clock)
        if not takes_gradient(x):  # token ids: torch's first stage runs no I
            bwd = []
        for p in params:
            p.grad = None
        self.run = run
        return (*_sums(fwd), *_sums(bwd), *_sums(wgt), *_sums(whole))

    def timing(self, rows: list[tuple[float, ...]]) -> LayerTiming:
        """The medians of ``rows`` and the layer's memory (see ``measure_layer``)."""
        module, x, params, loss, run = self.module, self.x, self.params, self.loss, self.run
        assert run is not None and rows, "sample before timing"
        cols = list(zip(*rows))
        total, frozen = saved_bytes(module, x, params, loss)
        y = run.state["y"]
        tpe = run.ctx.get("tokens_per_expert")
        return LayerTiming(
            f=summarize(list(cols[0])), i=summarize(list(cols[3])), w=summarize(list(cols[6])),
            b=summarize(list(cols[9])),
            a2a_f=summarize(list(cols[2])), a2a_b=summarize(list(cols[5])),
            expert=(_median(cols[1]), _median(cols[4]), _median(cols[7]), _median(cols[10])),
            a2a_bytes=_a2a_bytes(module, run),
            tokens_per_expert=tuple(tpe.tolist()) if tpe is not None else (),
            act_bytes=total, act_w_bytes=min(total, max(0, total - frozen)),
            param_bytes=sum(p.numel() * p.element_size() for p in params),
            out_bytes=y.numel() * y.element_size(),
        )


def accumulate_into(params: list[nn.Parameter]) -> None:
    """Give every trainable parameter a zero gradient, so the timed W and B add into it.

    A replay zeroes gradients once per step, so microbatches 2..M accumulate into an
    existing ``.grad`` (autograd's AccumulateGrad adds; torch's ``stage_backward_weight``
    likewise); a first-microbatch W only assigns, which is cheaper on CPU."""
    for p in params:
        if p.requires_grad:
            p.grad = torch.zeros_like(p)


def _median(values: tuple[float, ...]) -> float:
    return summarize(list(values)).median


def _a2a_bytes(module: nn.Module, run: LayerRun) -> int:
    total = 0
    for step in module.program():
        if isinstance(step, Exchange) and step.differentiable:  # the payload, not the token counts
            in_splits = run.ctx[step.splits][0]
            me = group_rank(step.group)
            rows = sum(in_splits) - in_splits[me]
            src = run.state[step.src]
            total += rows * src[0].numel() * src.element_size() if src.shape[0] else 0
    return total


def saved_bytes(module: nn.Module, x: torch.Tensor, params: list[nn.Parameter],
                loss: Callable[[torch.Tensor], torch.Tensor] | None) -> tuple[int, int]:
    """Saved-for-backward bytes of one forward: (weights trainable, weights frozen). Their
    difference is what only the weight-gradient needs: autograd saves a matmul's input only
    when the weight needs a gradient (derivatives.yaml, ``mm``)."""
    total = _saved_once(module, x, params, loss)
    flags = [p.requires_grad for p in params]
    try:
        for p in params:
            p.requires_grad_(False)
        frozen = _saved_once(module, x, params, loss)
    finally:
        for p, flag in zip(params, flags):
            p.requires_grad_(flag)
    return total, frozen


def _saved_once(module: nn.Module, x: torch.Tensor, params: list[nn.Parameter],
                loss: Callable[[torch.Tensor], torch.Tensor] | None) -> int:
    skip = {p.untyped_storage().data_ptr() for p in params}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> Any:
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in skip:
            seen[ptr] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run = LayerRun(module.program(), x, params, loss=loss)
        for task in run.forward_tasks():
            pending = task.run()
            if task.comm:
                pending.wait()
    return sum(seen.values())


def time_layer_calls(module: nn.Module, forward: Sample, clock: Clock, *, repeats: int,
                     warmup: int = 2, whole_only: bool = False) -> tuple[float, float, float, float]:
    """Median (F, I, W, B) seconds of one microbatch through ``module`` called whole, as
    torch's pipeline runtime calls a stage (``torch.distributed.pipelining._backward``:
    ``stage_backward_input`` for I, ``stage_backward_weight`` for W, ``autograd.backward``
    for B), with the collector held off ([Note: manual gc] in ``profiler.timing``); ``forward``
    runs it. ``whole_only`` times F and B alone (I and W 0): a module under torch's selective
    checkpointing runs one backward per forward, so I and W cannot be taken apart."""
    accumulate_into(list(module.parameters()))  # as microbatches 2..M of a step do
    with collector_off():
        rows = [_call_sample(module, forward, clock, whole_only) for _ in range(warmup + repeats)][warmup:]
    module.zero_grad(set_to_none=True)
    return tuple(statistics.median(r[j] for r in rows) for j in range(4))  # type: ignore[return-value]


def _call_sample(module: nn.Module, forward: Sample, clock: Clock,
                 whole_only: bool = False) -> tuple[float, float, float, float]:
    """One (F, I, W, B) sample: F, then I and W on that forward's graph; B on a fresh one
    (``whole_only``: F and B of one forward)."""
    if whole_only:
        t0 = clock.mark()
        _, out, grads = forward()
        t1 = clock.mark()
        torch.autograd.backward([out], grads)
        return clock.seconds(t0, t1), 0.0, 0.0, clock.seconds(t1, clock.mark())
    t0 = clock.mark()
    x, out, grads = forward()
    t1 = clock.mark()
    if x.requires_grad:
        _, groups = stage_backward_input([out], grads, [x], module.parameters())
        t2 = clock.mark()
        stage_backward_weight(module.parameters(), groups)
    else:  # token ids: torch's first stage skips I and runs the full backward as W
        t2 = clock.mark()
        torch.autograd.backward([out], grads)
    t3 = clock.mark()
    x, out, grads = forward()
    t4 = clock.mark()
    torch.autograd.backward([out], grads)  # B: torch's stage_backward is autograd.backward
    t5 = clock.mark()
    sec = clock.seconds
    return sec(t0, t1), sec(t1, t2), sec(t2, t3), sec(t4, t5)
