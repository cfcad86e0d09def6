"""Record traces ``ppplan profile --from-trace`` reads: name a model's layers' ranges
(``profiler.trace.names``) and write one PyTorch profiler trace per rank.

Used by ``ppplan replay --torch-profile`` and by a real job's launcher
(``examples/trace_hook.py``): ``label`` each layer module with its index and type,
``annotate_forward`` (F ranges) and, for a plain ``loss.backward()``, ``annotate_backward``
(one B range per layer, from module backward hooks), then run the steps inside
``recording``.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.autograd.profiler import record_function

from profiler.trace.names import CALIBRATION_RANGE, RUN_METADATA, a2a_range, layer_range
from profiler.trace.overhead import CALIBRATION_REPEATS, calibration_block, unprofiled_seconds

__all__ = ["label", "work_range", "a2a", "annotate_forward", "annotate_backward", "recording", "trace_path"]

_ATTR = "_ppplan_trace_label"


def label(module: nn.Module, index: int, type_key: str) -> None:
    """Mark ``module`` as layer ``index`` of type ``type_key`` (``LayerSpec.index``, ``type_key``)."""
    setattr(module, _ATTR, (index, type_key))


def work_range(module: nn.Module, kind: str) -> contextlib.AbstractContextManager:
    """The ``kind`` (F, I, W, B) range of a labelled layer; a no-op for an unlabelled one."""
    lab = getattr(module, _ATTR, None)
    return record_function(layer_range(kind, *lab)) if lab is not None else contextlib.nullcontext()


def a2a(name: str) -> contextlib.AbstractContextManager:
    """The range of one all-to-all (its layer is the work range around it)."""
    return record_function(a2a_range(name))


def _hooks(module: nn.Module, kind: str) -> tuple[Callable, Callable]:
    stack: list[Any] = []

    def enter(*_: Any) -> None:
        rng = work_range(module, kind)
        rng.__enter__()
        stack.append(rng)

    def leave(*_: Any) -> None:
        if stack:
            stack.pop().__exit__(None, None, None)
    return enter, leave


def annotate_forward(module: nn.Module) -> list[Any]:
    """F ranges around every forward of a labelled ``module`` that records autograd (not
    ``torch.no_grad`` shape inference); returns the hook handles."""
    enter, leave = _hooks(module, "F")
    return [module.register_forward_pre_hook(lambda m, a: enter() if torch.is_grad_enabled() else None),
            module.register_forward_hook(lambda m, a, o: leave() if torch.is_grad_enabled() else None)]


def annotate_backward(module: nn.Module) -> list[Any]:
    """One B range per backward of a labelled ``module`` (a runtime that does not split it)."""
    enter, leave = _hooks(module, "B")
    return [module.register_full_backward_pre_hook(lambda m, g: enter()),
            module.register_full_backward_hook(lambda m, gi, go: leave())]


def trace_path(folder: str, rank: int) -> str:
    """Where rank ``rank``'s trace goes."""
    return os.path.join(folder, f"rank-{rank}.json.gz")


@contextlib.contextmanager
def recording(folder: str, rank: int, run: dict[str, Any]) -> Iterator[Callable[[], None]]:
    """Profile the block (CPU, and CUDA when present) and write ``trace_path(folder, rank)``;
    yields ``step()`` to call before each step (its ``ProfilerStep#N`` ranges; the importer,
    like HTA, drops the last one, so the block calls it once more after the last step).
    ``run`` (model, scale, seq_len, micro_batch) is stored under ``RUN_METADATA``. Every thread
    is profiled (torch's ``profile_all_threads``), not only the one that entered the block.
    Before the block it measures the profiler's own cost (``profiler.trace.overhead``): the
    calibration block once unprofiled (its time stored as ``run["calibration"]``), then under
    the profiler in ``ppplan/calibrate`` ranges."""
    from torch._C._profiler import _ExperimentalConfig
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    os.makedirs(folder, exist_ok=True)
    open_step: list[Any] = []

    def step() -> None:  # the ProfilerStep#N range torch's own scheduled profiler writes
        if open_step:
            open_step.pop().__exit__(None, None, None)
        rng = record_function(f"ProfilerStep#{step.count}")
        rng.__enter__()
        open_step.append(rng)
        step.count += 1
    step.count = 0

    # every thread: the overlap runtime runs a fused pair's backward in a helper thread of its own
    config = _ExperimentalConfig(profile_all_threads=True)
    block = calibration_block()
    run = dict(run, calibration={"unprofiled_s": unprofiled_seconds(block), "repeats": CALIBRATION_REPEATS})
    with profile(activities=activities, experimental_config=config) as prof:
        prof.add_metadata_json(RUN_METADATA, json.dumps(run))
        for _ in range(CALIBRATION_REPEATS):
            with record_function(CALIBRATION_RANGE):
                block()
        try:
            yield step
        finally:
            if open_step:
                open_step.pop().__exit__(None, None, None)
    prof.export_chrome_trace(trace_path(folder, rank))
