"""Replay a plan as a real pipeline-parallel training step on torch.distributed.

``replay(plan, ReplayOptions(...))`` runs the plan's exact per-rank action order with
torch.distributed.pipelining (gloo on CPU, NCCL on GPU), and returns the measured
step time, busy time, bubble, peak memory and MFU next to the prediction, the
gradient check against a single-process run, and a trace. Modules: ``lowering``
(plan -> torch actions, checks), ``model`` (stages), ``timing`` (per-action spans),
``worker`` (one rank), ``launch`` (processes), ``measure``/``predict``/``report``
(figures), ``peak`` (MFU's fixed denominator), ``decompose`` (where measured and predicted
differ), ``calibrate`` (runtime costs a per-layer table misses), ``calibrated`` (``ppplan
replay --calibrate``), ``gradcheck``, ``costs`` (re-prediction costs, timed by the profiler),
``trace``. ``replay_interleaved`` replays several plans with their steps alternating.
"""

from __future__ import annotations

from planner.replay.launch import replay, replay_interleaved, under_torchrun
from planner.replay.options import ReplayFailed, ReplayOptions, ReplayResult

__all__ = ["replay", "replay_interleaved", "under_torchrun", "ReplayOptions", "ReplayResult", "ReplayFailed"]
