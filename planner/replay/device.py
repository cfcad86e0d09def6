"""Where a replay runs: device and backend choice, device label, peak FLOP/s, memory.

MFU needs a peak (``planner.replay.peak``). On CUDA it is the GPU preset matching the
device name (``planner.core.hardware.GPU_PRESETS``, dense BF16). On CPU it is the peak
``ppplan profile`` measured once and stored in the profile (``profiler.cpu_peak``).
"""

from __future__ import annotations

import os

import torch

from planner.core.hardware import GPU_PRESETS

__all__ = ["pick_device", "device_label", "gpu_peak", "rss_bytes",
           "peak_rss_bytes", "reset_peak_rss"]


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
