"""Replay a plan as a real pipeline-parallel training step on torch.distributed.

``replay(plan, ReplayOptions(...))`` runs the plan's exact per-rank action order with
torch.distributed.pipelining (gloo on CPU, NCCL on GPU), and returns the measured
step time, busy time, bubble, peak memory and MFU next to the prediction, the
gradient check against a single-process run, and a trace. Modules: ``options`` (flags,
result, checks before launch), ``launch`` (processes), ``worker`` (one rank), ``device``
(device, core binding, MFU's fixed peak), ``lowering`` (plan -> model stages, EP layout,
torch actions), ``timing`` (per-action spans, layer cuts, fused pairs), ``costs``
(re-prediction costs timed by the profiler, the emulated link), ``predict`` (the prediction
judged against, ``--calibrate``), ``calibrate`` (runtime costs a per-layer table misses),
``measure`` (measured figures, decomposition), ``report`` (reference run, gradient check,
report, trace). ``replay_interleaved`` replays several plans with their steps alternating.
"""

from __future__ import annotations

from planner.replay.launch import replay, replay_interleaved, under_torchrun
from planner.replay.options import ReplayFailed, ReplayOptions, ReplayResult

__all__ = ["replay", "replay_interleaved", "under_torchrun", "ReplayOptions", "ReplayResult", "ReplayFailed"]
