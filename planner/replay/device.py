"""Where a replay runs: device and backend, each CPU rank on cores of its own, and the
fixed peak FLOP/s its MFU divides by (sections below, each with its notes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from planner.core.errors import InputError
from planner.core.hardware import GPU_PRESETS

__all__ = ["pick_device", "device_label", "gpu_peak", "rss_bytes", "peak_rss_bytes", "reset_peak_rss", "bind_rank",
           "Peak", "replay_peak", "stored_cpu_peak", "recorded_profile"]


# ---- device, backend, label, memory -------------------------------------------------------------
# Where a replay runs: device and backend choice, device label, peak FLOP/s, memory.
#
# MFU needs a peak (``replay_peak`` below). On CUDA it is the GPU preset matching the
# device name (``planner.core.hardware.GPU_PRESETS``, dense BF16). On CPU it is the peak
# ``ppplan profile`` measured once and stored in the profile (``profiler.cpu_peak``).


def pick_device(local_rank: int) -> tuple[torch.device, str]:
    """(device, backend): CUDA + NCCL when a GPU is visible, else CPU + gloo."""
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device()), "nccl"
    return torch.device("cpu"), "gloo"


def device_label(device: torch.device) -> str:
    """``cpu`` or the CUDA device name; compared with a profile's ``device`` field."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def gpu_peak(device: torch.device) -> tuple[float, str] | None:
    """(peak FLOP/s, label) of the GPU preset whose name appears in the device name."""
    name = torch.cuda.get_device_name(device).lower()
    for key, spec in GPU_PRESETS.items():
        if key in name:
            return spec.peak_flops, f"{key} preset, dense BF16"
    return None


def rss_bytes() -> int:
    """Resident set size of this process now."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> None:
    """Restart the resident-set high-water mark (Linux: ``5`` to /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def peak_rss_bytes() -> int:
    """Resident-set high-water mark since the last ``reset_peak_rss`` (VmHWM, KiB in /proc)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


# ---- core binding -------------------------------------------------------------------------------
# Each CPU rank of a replay on cores of its own.
#
# [Note: core binding] On the CPU a replay's ranks are processes that the kernel may move
# between cores. A fused pair's two halves hand the compute over at every all-to-all (a
# futex wake-up each time), and an emulated link's exchange ends with a sleep; when the
# wake-up lands on a core that another rank is using, it waits for that rank's time slice,
# and when it lands on another core than the last turn's, the turn starts with that core's
# caches (one process timing fused layer pairs alone, ``benchmarks/overlap.py`` (a): on one
# core every MoE/MoE pair hid within 0.09 of the planner's share, mostly within 0.04; free to
# move, 0.04-0.19 less).
# Measured on 2 cores (Qwen3-Next stage of 27 layers at 1/32 width, emulated link, two
# processes at once, each timing F, B and the fused pair): unbound, one process's fused
# pair hid 23 ms of the 79 ms it hides running alone; bound to one core each, 64 ms and
# 86 ms. A replay step showed the same thing as plain forwards taking twice their table
# time while the other rank ran a fused pair. So when there are cores enough, rank
# ``local_rank`` is bound to ``threads`` cores of its own, as MPI's ``--bind-to core`` and
# torchrun's ``--numa-binding`` do, before any thread of its own (gloo's, the fused pair's
# helper) starts, so that they inherit it. With too few cores nothing is bound, and the
# report says so. Only the CPU path binds: a GPU rank's compute is on its device.


def _available() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def bind_rank(local_rank: int, local_world: int, threads: int) -> str:
    """Bind this process to ``threads`` cores of its own when the machine has
    ``local_world x threads`` of them; returns what was done, for the report."""
    cpus = _available()
    if not hasattr(os, "sched_setaffinity"):
        return "not bound: this platform cannot bind processes to cores"
    if local_world * threads > len(cpus):
        return (f"not bound: {local_world} ranks x {threads} thread(s) > {len(cpus)} available cores "
                "(ranks share cores; see planner.replay.device)")
    mine = cpus[local_rank * threads:(local_rank + 1) * threads]
    os.sched_setaffinity(0, mine)
    return f"bound to cores {','.join(map(str, mine))}"


# ---- MFU's peak ---------------------------------------------------------------------------------
# The peak FLOP/s a replay's MFU divides by: fixed and stated, never measured at start-up.
#
# - CUDA: the GPU preset matching the device name (``device.gpu_peak``, dense BF16).
# - CPU: the FP32 matmul peak ``ppplan profile --device cpu`` measured once, before its
#   profiling processes started, and stored in the profile (``meta.cpu_peak``,
#   ``profiler.cpu_peak``); the replay reads it from the profile the plan was made from
#   (``costs.profile``, ``recorded_profile``), or from ``--profile``. A peak measured when
#   the replay starts moves with the load of the moment, and so does every MFU divided by it.
# - Anything else (CPU without a stored peak, a GPU without a preset): no peak, MFU n/a.


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
