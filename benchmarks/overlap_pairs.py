"""Part (a) of ``benchmarks/overlap.py``: the hidden share of one fused layer pair, measured.

One process, the EMULATED link (``profiler.layers.program.EmulatedLink``): layer a's
forward (microbatch 1) and layer b's input-gradient (microbatch 0) run once each alone
and once as a fused pair through ``planner.runtime``'s turn-taking (``run_pair``), timed by
the profiler's pair timer (``profiler.pairs.time_pair_calls``, as the replay times its pairs).
Each exchange's link time gives the all-to-alls the share of the layer that the
analytical profile gives them on the GPU (``a2a_f / f`` of the forward, ``a2a_b / i``
of the input-gradient), applied to the compute time measured here. Measured hidden
share ``1 - fused / (F + I)``; predicted: the analytical pair cost's
``1 - OV[a, b] / (f_a + a2a_f_a + i_b + a2a_b_b)``.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

__all__ = ["measure_pair", "compute_only"]


def _layer(spec: Any, index: int, scale: float, seconds: dict[str, float]):
    from profiler.layers import build_layer
    from profiler.layers.program import EmulatedLink

    return build_layer(spec, spec.layers[index], scale=scale, ep_group=EmulatedLink(seconds=seconds), seed=0)


def _sample(spec: Any, layer: Any, index: int, scale: float, seq: int, seed: int, batch: int = 1):
    """``profiler.measure.Sample`` of ``layer``: a fresh input (seeds from ``seed`` on) each call."""
    from profiler.layers import layer_input

    seeds = itertools.count(seed)

    def forward() -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        x = layer_input(spec, spec.layers[index], scale=scale, batch=batch, seq_len=seq,
                        seed=next(seeds)).requires_grad_()
        out = layer(x)
        return x, out, [torch.ones_like(out)]
    return forward


def _input_gradient(layer: Any, forward: Any):
    """``() -> I``: the forward I needs (untimed), then torch's input-gradient of it."""
    from torch.distributed.pipelining._backward import stage_backward_input

    def prepare():
        x, out, grads = forward()
        return lambda: stage_backward_input([out], grads, [x], layer.parameters())
    return prepare


def _link_seconds(compute_f: float, compute_i: float, lc: Any) -> dict[str, float]:
    f = compute_f * (lc.a2a_f / lc.f) / 2 if lc.f else 0.0
    b = compute_i * (lc.a2a_b / lc.i) / 2 if lc.i else 0.0
    return {"dispatch": f, "combine": f, "dispatch.grad": b, "combine.grad": b}


def compute_only(spec: Any, index: int, scale: float, seq: int, reps: int, *, batch: int = 1) -> tuple[float, float]:
    """Median forward and input-gradient time of a layer with a zero-time link, ``batch``
    sequences per microbatch (``profiler.measure.time_layer_calls``)."""
    from profiler.measure import time_layer_calls
    from profiler.timing import Clock

    layer = _layer(spec, index, scale, {})
    f, i, _, _ = time_layer_calls(layer, _sample(spec, layer, index, scale, seq, 0, batch), Clock(torch.device("cpu")),
                                  repeats=reps)
    return f, i


def _fused(forward: Any, backward: Any) -> None:
    from planner.runtime.baton import run_pair
    from profiler.layers.program import set_wait_hook

    run_pair(forward, backward, timeout_s=60, install=set_wait_hook)


def measure_pair(spec: Any, table: Any, a: int, b: int, *, scale: float, seq: int, reps: int) -> dict[str, Any]:
    """Measured and predicted hidden share of (F of layer a; I of layer b), timed alone and
    fused by ``profiler.pairs.time_pair_calls``, the replay's pair timer."""
    from profiler.pairs import time_pair_calls
    from profiler.timing import Clock

    la, lb = table.layers[a], table.layers[b]
    ca, cb = compute_only(spec, a, scale, seq, reps), compute_only(spec, b, scale, seq, reps)
    mod_a = _layer(spec, a, scale, _link_seconds(*ca, la))
    mod_b = _layer(spec, b, scale, _link_seconds(*cb, lb))
    forward = _sample(spec, mod_a, a, scale, seq, 100)

    def reset() -> None:
        for m in (mod_a, mod_b):
            m.zero_grad(set_to_none=True)
    timing = time_pair_calls(forward, _input_gradient(mod_b, _sample(spec, mod_b, b, scale, seq, 200)), fuse=_fused,
                             clock=Clock(torch.device("cpu")), repeats=reps, reset=reset)
    s, fu = timing.serial.median, timing.ov.median
    pred_serial = la.f + la.a2a_f + lb.i + lb.a2a_b
    ov = table.pairs.get((la.type, lb.type), pred_serial)
    link = 2 * _link_seconds(*ca, la)["dispatch"] + 2 * _link_seconds(*cb, lb)["dispatch.grad"]
    return {"pair": f"{la.type} F ; {lb.type} I", "layers": [a, b],
            "measured_serial_s": s, "measured_fused_s": fu, "measured_hidden": 1 - fu / s,
            "emulated_link_s": link, "link_share_of_serial": link / s,
            "predicted_hidden": 1 - ov / pred_serial, "difference": (1 - fu / s) - (1 - ov / pred_serial)}
