"""Options of a replay (``ppplan replay`` flags, one field each), its result, and the checks
made before any process starts (a model too narrow to build, or too big for this machine).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.layer_math import layer_params
from planner.core.plan import Plan

__all__ = ["ReplayOptions", "ReplayResult", "ReplayFailed", "check_fits"]


# ---- options and result -------------------------------------------------------------------------
# Options of a replay (``ppplan replay`` flags, one field each) and its result.


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    """How to replay a plan."""

    scale: float | None = None
    """Width factor of the replayed model; None = the scale of the plan's profile."""
    seq_len: int | None = None
    """Tokens per sequence; None = the plan's (profile's) sequence length."""
    steps: int = 5
    """Timed steps."""
    warmup: int = 2
    """Untimed steps before the timed ones (after the gradient-check step)."""
    seed: int = 0
    """Seed of weights and data."""
    grad_check: bool = True
    """Compare the first step's gradients with a single-process reference."""
    timeout_s: float = 60.0
    """Limit on every collective and receive (``init_process_group(timeout=...)``)."""
    deadline_s: float = 900.0
    """Limit on the whole replay; the launcher kills every rank after it."""
    threads: int | None = None
    """Torch threads per rank on CPU; None = CPU cores / local ranks (at least 1)."""
    bind_cores: bool = True
    """On CPU, bind each rank to cores of its own when there are enough
    (``planner.replay.device`` [Note: core binding])."""
    ep: int | None = None
    """Expert-parallel size of the replay (pp x ep processes); None = the plan's EP."""
    link: str = "real"
    """``real``: MoE all-to-alls over gloo/NCCL; ``emulated``: each is a local copy of the
    same rows that completes no earlier than issue + the analytical cost model's time for
    it (see ``planner.replay.costs``), every figure then labelled emulated."""
    link_share: float | None = None
    """With the emulated link: the share of the MoE layers' time (their compute measured
    here plus the exchanges) the exchanges take, which sets the link's scale
    (``planner.replay.costs`` [Note: link share]); None = the share the analytical model
    gives them on the plan's cluster."""
    link_scale: float | None = None
    """Factor on the emulated link's analytical times instead of ``link_share``; None = set
    by the share."""
    profile: str | None = None
    """The profile the plan was made from; on CPU its stored peak is MFU's denominator
    (``planner.replay.device``)."""
    moe_expert_capacity_factor: float | None = None
    """Megatron's ``--moe-expert-capacity-factor``: each expert takes at most ``ceil(tokens x
    top_k / experts x C)`` copies of a rank's tokens, the rest dropped; None = dropless
    (``profiler.layers.moe_capacity``)."""
    moe_pad_expert_input_to_capacity: bool = False
    """Megatron's ``--moe-pad-expert-input-to-capacity``: fixed-size expert buffers, static
    all-to-all splits, no host sync inside a MoE layer."""
    moe_token_drop_policy: str = "probs"
    """Megatron's ``--moe-token-drop-policy``: ``probs`` or ``position``."""
    modules: str = "native"
    """Layer modules the stages are built from: ``native`` (``profiler.layers``) or
    ``transformers`` (the model family's own classes, ``profiler.hf``)."""
    torch_profile: str | None = None
    """Folder for one PyTorch profiler trace per rank of the timed steps, its ranges named for
    ``ppplan profile --from-trace`` (``profiler.trace.names``); None: no trace."""
    fault: str | None = None
    """Fault injection for tests: ``die:RANK`` exits that rank, ``hang:RANK`` blocks it,
    both just before the first step; ``pair-die:RANK`` / ``pair-raise:RANK`` exit or raise
    in the backward half of that rank's first fused pair, while its forward half runs."""

    def check(self) -> "ReplayOptions":
        """Raise ``InputError`` naming the option on a bad value."""
        if self.scale is not None and not 0 < self.scale <= 1:
            raise InputError("--scale", f"must be in (0, 1], got {self.scale}", "e.g. --scale 0.05")
        for name, value, low in (("--steps", self.steps, 1), ("--warmup", self.warmup, 0),
                                 ("--seq-len", self.seq_len, 1), ("--threads", self.threads, 1)):
            if value is not None and value < low:
                raise InputError(name, f"must be >= {low}, got {value}")
        if self.ep is not None and self.ep < 1:
            raise InputError("--ep", f"must be >= 1, got {self.ep}", "e.g. --ep 2")
        if self.link not in ("real", "emulated"):
            raise InputError("--link", f"unknown {self.link!r}", "use real or emulated")
        if self.link_scale is not None and not self.link_scale > 0:
            raise InputError("--link-scale", f"must be positive, got {self.link_scale}")
        if self.link_share is not None and not 0 < self.link_share < 1:
            raise InputError("--link-share", f"must be in (0, 1), got {self.link_share}", "e.g. --link-share 0.3")
        if self.link_share is not None and self.link_scale is not None:
            raise InputError("--link-share", "and --link-scale both given", "pass one of them")
        if self.profile is not None:
            from planner.replay.device import stored_cpu_peak

            stored_cpu_peak(self.profile)
        if self.timeout_s <= 0 or self.deadline_s <= 0:
            raise InputError("--timeout", "must be positive")
        self.moe_capacity()
        if self.modules not in ("native", "transformers"):
            raise InputError("--modules", f"unknown {self.modules!r}", "use native or transformers")
        if self.fault is not None:
            kind, _, rank = self.fault.partition(":")
            if kind not in ("die", "hang", "pair-die", "pair-raise") or not rank.isdigit():
                raise InputError("fault", f"bad value {self.fault!r}",
                                 "use die:RANK, hang:RANK, pair-die:RANK or pair-raise:RANK")
        return self

    def moe_capacity(self, plan: Any = None) -> Any:
        """The MoE layers' ``CapacityMode`` (None: dropless); ``InputError`` on bad flags. The
        flags win; without them, ``plan``'s own ``training.moe_expert_capacity_factor`` and
        ``moe_pad_expert_input_to_capacity`` (the mode the plan was costed for)."""
        from profiler.layers.moe_capacity import capacity_mode

        factor, pad = self.moe_expert_capacity_factor, self.moe_pad_expert_input_to_capacity
        if factor is None and not pad and plan is not None:
            train = plan.cluster.settings
            factor, pad = train.get("moe_expert_capacity_factor"), bool(train.get("moe_pad_expert_input_to_capacity"))
        return capacity_mode(factor, pad=pad, drop_policy=self.moe_token_drop_policy)


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    """What a replay returns on rank 0."""

    report: dict[str, Any]
    """The JSON report: measured, predicted, prediction_error, grad_check, ..."""
    trace: dict[str, Any] = field(default_factory=dict)
    """Chrome/Perfetto trace of the measured and predicted timelines."""
    table: Any = None
    """The ``CostTable`` measured here that the re-prediction used; None when the plan's own
    stage costs were simulated (``planner.replay.predict``)."""


class ReplayFailed(RuntimeError):
    """A rank died, hung past its timeout, or raised; every rank has been stopped."""

    def __init__(self, message: str, *, pids: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.pids = pids
        """Process ids of the ranks the launcher started (all stopped by now)."""


# ---- refused before launch ----------------------------------------------------------------------
# Refuse, before starting any process, a replay whose model is too narrow to build or cannot
# fit in this machine's memory.


_BYTES_PER_PARAM = 4 * 3
"""FP32 weights + gradients, and the reference model rank 0 builds for the gradient check."""


def _available_bytes() -> int:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits(plan: Plan, opts: ReplayOptions, *, copies: int = 1) -> None:
    """``InputError`` naming ``--scale`` when the scale is too small to keep the model whole
    (``profiler.layers.scaling`` [Note: smallest scale]) or, on CPU, when the model's weights
    alone exceed free memory (``copies``: plans replayed in one launch, each with its own stages)."""
    import torch

    from planner.replay.worker import resolve_shape
    from profiler.layers import scaled_model

    scale, _ = resolve_shape(plan, opts)
    spec = scaled_model(load_model(str(plan.model["name"])), scale)
    if torch.cuda.is_available():
        return  # a CUDA out-of-memory error is reported by the rank that hits it
    need = sum(layer_params(layer, spec).total for layer in spec.layers) * _BYTES_PER_PARAM * copies
    have = _available_bytes()
    if need > have:
        fit = scale * have / need
        raise InputError("--scale", f"the model at scale {scale:g} needs about {need / 2**30:.1f} GiB "
                         f"for weights and gradients, {have / 2**30:.1f} GiB is free",
                         f"pass --scale {fit:.2g} or smaller")
