"""The fused pairs of a plan, measured here through the overlap runtime.

[Note: pairs measured here] A fused pair hides what the overlap runtime
(``planner.runtime``) manages to hide on this machine, which need not be what the
planner's overlap model (``profiler.overlap_dag``, built for a GPU with two streams) says:
the runtime computes one half at a time and hands over only at the all-to-alls, so a pair
hides at most the link time that the other half's next compute segment covers, and under
``recompute: full`` the backward half has four exchanges per MoE layer to the forward's
two. The measured profiler measures its pairs on the device at hand
(``profiler.pairs``); a re-prediction made here does the same for the pairs the plan
fuses: for each (forward layer type, backward layer type) that a fused action of the plan
puts side by side (``planner.core.stage_costs.fused_range_cost``: F of the j-th forward
layer beside the backward of the j-th layer from the end), one layer of each type is
built as the replay builds it (its MoE exchanging over the replay's link, recomputing as
the plan does) and timed, alternating, alone (F, then the backward: B where the plan
fuses a full backward, else I) and fused (``planner.runtime.baton.run_pair``). The
seconds the pair hides (the median of the paired differences ``alone - fused``, over
ranks, which all measure at once) replace the carried-over share
(``planner.replay.link`` [Note: re-prediction with the link]). Negative when the two
halves cost more fused than alone (a thread hand-over with nothing to hide).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.distributed.pipelining._backward import stage_backward_input

from planner.core.plan import Plan
from planner.core.schedule import OVERLAP, ActionKind
from planner.replay.costs_here import first_of_type, layer_module, sampler
from planner.replay.manual_gc import collector_off
from planner.replay.model import ReplayModel
from planner.replay.timing import Clock

__all__ = ["fused_type_pairs", "measure_hidden"]

PairKey = tuple[str, str, bool]
"""(forward layer type, backward layer type, full backward B rather than I)."""


def fused_type_pairs(plan: Plan, rm: ReplayModel) -> list[PairKey]:
    """The layer-type pairs the plan's fused actions put side by side, sorted."""
    bounds, types = plan.bounds(), [layer.type_key for layer in rm.spec.layers]
    found: set[PairKey] = set()
    for actions in plan.parsed_schedule().values():
        for act in actions:
            if act.kind != OVERLAP:
                continue
            fwd, bwd = act.sub
            fl = list(range(*bounds[fwd.stage]))
            bl = list(reversed(range(*bounds[bwd.stage])))
            found.update((types[fl[j]], types[bl[j]], bwd.kind == ActionKind.B)
                         for j in range(min(len(fl), len(bl))))
    return sorted(found)


def _backward(module: Any, x: torch.Tensor, out: torch.Tensor, grads: list | None, full: bool) -> Callable[[], None]:
    """The backward the runtime runs: full B (``autograd.backward``) or torch's input-gradient
    (``stage_backward_input``; token ids have none, so the full backward stands in)."""
    def run() -> None:
        if full or not x.requires_grad:
            torch.autograd.backward([out], grads)
        else:
            stage_backward_input([out], grads, [x], module.parameters())
    return run


def _one(modules: dict[int, Any], samplers: dict[int, Any], a: int, b: int, full: bool, clock: Clock,
         reps: int) -> float:
    """Median seconds the pair (F of layer a; backward of layer b) hides fused: of the paired
    differences alone - fused, after two warm-up repetitions."""
    with collector_off():  # as in the timed steps ([Note: manual gc] in planner.replay.manual_gc)
        samples = [_sample(modules, samplers, a, b, full, clock, rep) for rep in range(reps + 2)][2:]
    return statistics.median(alone - fused for alone, fused in samples)


def _sample(modules: dict[int, Any], samplers: dict[int, Any], a: int, b: int, full: bool, clock: Clock,
            rep: int) -> tuple[float, float]:
    """(alone, fused) seconds of layer a's forward and layer b's backward, run in an order
    that alternates with ``rep``."""
    from planner.runtime.baton import run_pair
    from profiler.layers.program import set_wait_hook

    took = {}
    for fused in ((False, True) if rep % 2 else (True, False)):
        x, out, grads = samplers[b]()  # the backward's own forward, untimed
        back = _backward(modules[b], x, out, grads, full)
        t0 = clock.mark()
        if fused:
            run_pair(samplers[a], back, timeout_s=120, install=set_wait_hook)
        else:
            samplers[a]()
            back()
        t1 = clock.mark()
        for k in {a, b}:
            modules[k].zero_grad(set_to_none=True)
        took[fused] = clock.seconds(t0, t1)
    return took[False], took[True]


def measure_hidden(rm: ReplayModel, pairs: list[PairKey], device: torch.device, clock: Clock, *,
                   link: Any, recompute: str, reps: int = 7) -> dict[PairKey, float]:
    """Seconds each pair type hides fused, measured here ([Note: pairs measured here]);
    ``link`` is what the replay's MoE layers exchange over (``layer index -> EmulatedLink``)."""
    first = first_of_type(rm)
    used = sorted({first[t] for ta, tb, _ in pairs for t in (ta, tb)})
    modules = {k: layer_module(rm, k, device, recompute, link) for k in used}
    samplers = {k: sampler(rm, k, modules[k], device) for k in used}
    seconds = torch.tensor([_one(modules, samplers, first[ta], first[tb], full, clock, reps)
                            for ta, tb, full in pairs], dtype=torch.float64, device=device)
    if dist.is_initialized() and seconds.numel():
        dist.all_reduce(seconds)
        seconds /= dist.get_world_size()
    return {p: float(v) for p, v in zip(pairs, seconds)}
