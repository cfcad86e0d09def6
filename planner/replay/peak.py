"""The peak FLOP/s a replay's MFU divides by: fixed and stated, never measured at start-up.

- CUDA: the GPU preset matching the device name (``device.gpu_peak``, dense BF16).
- CPU: the FP32 matmul peak ``ppplan profile --device cpu`` measured once, before its
  profiling processes started, and stored in the profile (``meta.cpu_peak``,
  ``profiler.cpu_peak``); the replay reads it from the profile the plan was made from
  (``costs.profile``, ``recorded_profile``), or from ``--profile``. A peak measured when
  the replay starts moves with the load of the moment, and so does every MFU divided by it.
- Anything else (CPU without a stored peak, a GPU without a preset): no peak, MFU n/a.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.core.errors import InputError

__all__ = ["Peak", "replay_peak", "stored_cpu_peak", "recorded_profile"]

NO_CPU_PEAK = ("n/a: no stored CPU peak (pass --profile PROFILE, the ppplan profile --device cpu "
               "output the plan was made from)")


@dataclass(frozen=True, kw_only=True)
class Peak:
    """MFU's denominator and where it came from."""

    flops_per_s: float | None
    """Peak FLOP/s of one device (one rank); None: no MFU."""
    label: str
    """Where the figure comes from, in words (the report's ``peak_flops_source``)."""


def stored_cpu_peak(path: str) -> Peak:
    """The CPU peak stored in the profile at ``path``; ``InputError`` naming ``--profile`` when
    the file holds none."""
    from planner.core.costs_io import load_costs

    table = load_costs(path)
    stored = table.meta.get("cpu_peak")
    if not isinstance(stored, dict) or not isinstance(stored.get("flops_per_s"), (int, float)) \
            or stored["flops_per_s"] <= 0:
        raise InputError("--profile", f"{path} stores no CPU peak (meta.cpu_peak)",
                         "profile again with ppplan profile --device cpu, which measures and stores it")
    return Peak(flops_per_s=float(stored["flops_per_s"]), label=_label(path, stored))


def _label(path: str, stored: dict[str, Any]) -> str:
    return (f"measured CPU peak stored in profile {path} at {stored.get('measured_at', '?')}: "
            f"{stored['flops_per_s'] / 1e9:.1f} GFLOP/s, {stored.get('method', 'FP32 matmul')}, "
            f"{stored.get('threads', '?')} thread(s), 1-min load average then "
            f"{stored.get('load_average_1min', float('nan')):.2f}")


def replay_peak(device: Any, profile: str | None) -> Peak:
    """The peak for a replay on ``device`` (a ``torch.device``): the GPU preset on CUDA, else
    the CPU peak stored in ``profile``."""
    if device.type == "cuda":
        from planner.replay.device import gpu_peak

        found = gpu_peak(device)
        if found is None:
            return Peak(flops_per_s=None, label="n/a: no GPU preset matches this device's name")
        return Peak(flops_per_s=found[0], label=found[1])
    if profile is None:
        return Peak(flops_per_s=None, label=NO_CPU_PEAK)
    return stored_cpu_peak(profile)


def recorded_profile(costs: dict[str, Any], plan_path: str | Path) -> str | None:
    """The CPU profile a plan was made from (its ``costs`` section: ``profile``, as given to
    ``ppplan plan``, and ``profile_sha256``), looked for from the working directory, then
    from the plan file's folder; None when the plan records no measured CPU profile.
    ``InputError`` naming ``--profile`` when the file is gone or its content changed."""
    recorded = costs.get("profile")
    if not isinstance(recorded, str) or costs.get("device") != "cpu":
        return None
    from planner.core.costs_io import file_sha256

    places = [Path(recorded)] if Path(recorded).is_absolute() else [Path(recorded), Path(plan_path).parent / recorded]
    found = [str(p) for p in dict.fromkeys(places) if p.is_file()]
    fix = "pass --profile PROFILE, the ppplan profile output the plan was made from"
    if not found:
        raise InputError("--profile", f"the plan's profile {recorded} is gone (looked in the working directory "
                         f"and beside {plan_path})", fix)
    digest = costs.get("profile_sha256")
    for path in found:
        if digest is None or file_sha256(path) == digest:
            return path
    raise InputError("--profile", f"the plan's profile {found[0]} changed since the plan was made (its sha256 "
                     "is not the plan's costs.profile_sha256)", f"{fix}, or re-plan from it")
