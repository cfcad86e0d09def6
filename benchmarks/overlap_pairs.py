"""Part (a) of ``benchmarks/overlap.py``: the hidden share of one fused layer pair, measured.

One process, the EMULATED link (``profiler.layers.program.EmulatedLink``): layer a's
forward (microbatch 1) and layer b's input-gradient (microbatch 0) run once each alone
and once as a fused pair through ``planner.runtime``'s turn-taking (``run_pair``).
Each exchange's link time gives the all-to-alls the share of the layer that the
analytical profile gives them on the GPU (``a2a_f / f`` of the forward, ``a2a_b / i``
of the input-gradient), applied to the compute time measured here. Measured hidden
share ``1 - fused / (F + I)``; predicted: the analytical pair cost's
``1 - OV[a, b] / (f_a + a2a_f_a + i_b + a2a_b_b)``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

__all__ = ["measure_pair", "compute_only"]


def _layer(spec: Any, index: int, scale: float, seconds: dict[str, float]):
    from profiler.layers import build_layer
    from profiler.layers.program import EmulatedLink

    return build_layer(spec, spec.layers[index], scale=scale, ep_group=EmulatedLink(seconds=seconds), seed=0)


def _input(spec: Any, index: int, scale: float, seq: int, seed: int, batch: int = 1) -> torch.Tensor:
    from profiler.layers import layer_input

    return layer_input(spec, spec.layers[index], scale=scale, batch=batch, seq_len=seq, seed=seed).requires_grad_()


def _fwd(layer: Any, x: torch.Tensor) -> float:
    start = time.perf_counter()
    layer(x)
    return time.perf_counter() - start


def _bwd_prepared(layer: Any, x: torch.Tensor):
    out = layer(x)
    grad = torch.ones_like(out)
    return lambda: torch.autograd.grad(out, x, grad)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _link_seconds(compute_f: float, compute_i: float, lc: Any) -> dict[str, float]:
    f = compute_f * (lc.a2a_f / lc.f) / 2 if lc.f else 0.0
    b = compute_i * (lc.a2a_b / lc.i) / 2 if lc.i else 0.0
    return {"dispatch": f, "combine": f, "dispatch.grad": b, "combine.grad": b}


def compute_only(spec: Any, index: int, scale: float, seq: int, reps: int, *, batch: int = 1) -> tuple[float, float]:
    """Median forward and input-gradient time of a layer with a zero-time link, ``batch``
    sequences per microbatch."""
    layer = _layer(spec, index, scale, {})
    fs, bs = [], []
    for r in range(reps):
        fs.append(_fwd(layer, _input(spec, index, scale, seq, r, batch)))
        bs.append(_timed(_bwd_prepared(layer, _input(spec, index, scale, seq, r, batch))))
    return statistics.median(fs), statistics.median(bs)


def measure_pair(spec: Any, table: Any, a: int, b: int, *, scale: float, seq: int, reps: int) -> dict[str, Any]:
    """Measured and predicted hidden share of (F of layer a; I of layer b)."""
    from planner.replay.manual_gc import collector_off
    from planner.runtime.baton import run_pair
    from profiler.layers.program import set_wait_hook

    la, lb = table.layers[a], table.layers[b]
    ca, cb = compute_only(spec, a, scale, seq, reps), compute_only(spec, b, scale, seq, reps)
    mod_a = _layer(spec, a, scale, _link_seconds(*ca, la))
    mod_b = _layer(spec, b, scale, _link_seconds(*cb, lb))
    serial, fused = [], []
    for r in range(reps):  # alone and fused alternate, so machine load falls on both alike
        with collector_off():  # no collection inside a timing, as in the replay's steps
            f = _fwd(mod_a, _input(spec, a, scale, seq, r))
            i = _timed(_bwd_prepared(mod_b, _input(spec, b, scale, seq, r)))
            serial.append(f + i)
            x_a = _input(spec, a, scale, seq, 100 + r)
            bwd = _bwd_prepared(mod_b, _input(spec, b, scale, seq, 200 + r))
            fused.append(_timed(lambda: run_pair(lambda: mod_a(x_a), bwd, timeout_s=60, install=set_wait_hook)))
    s, fu = statistics.median(serial), statistics.median(fused)
    pred_serial = la.f + la.a2a_f + lb.i + lb.a2a_b
    ov = table.pairs.get((la.type, lb.type), pred_serial)
    link = 2 * _link_seconds(*ca, la)["dispatch"] + 2 * _link_seconds(*cb, lb)["dispatch.grad"]
    return {"pair": f"{la.type} F ; {lb.type} I", "layers": [a, b],
            "measured_serial_s": s, "measured_fused_s": fu, "measured_hidden": 1 - fu / s,
            "emulated_link_s": link, "link_share_of_serial": link / s,
            "predicted_hidden": 1 - ov / pred_serial, "difference": (1 - fu / s) - (1 - ov / pred_serial)}
