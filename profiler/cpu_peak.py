"""The CPU's peak FP32 matmul rate, measured once by ``ppplan profile --device cpu`` and
stored with the profile (``meta.cpu_peak``), so that a replay's MFU divides by a fixed,
stated figure instead of one measured at its start-up under whatever load is present
(measured that way, the MFU of one prediction moved severalfold between runs).

The rate is the best of many short ``n x n`` products (2 n^3 FLOPs each) with the
thread count one replay rank gets (``profiler.measured`` [Note: CPU threads]): the best
sample is the one least disturbed by other jobs, and the 1-minute load average when it
was taken is stored beside it.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from typing import Any

import torch

__all__ = ["measure_cpu_peak"]


def measure_cpu_peak(threads: int, *, n: int = 512, seconds: float = 1.0) -> dict[str, Any]:
    """Best FP32 matmul FLOP/s of this CPU with ``threads`` torch threads, with when and under
    what load it was measured (the profile's ``meta.cpu_peak``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        best = 0.0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            for _ in range(4):
                torch.mm(a, b)
            best = max(best, 4 * 2.0 * n**3 / (time.perf_counter() - t0))
    finally:
        torch.set_num_threads(before)
    return {"flops_per_s": best, "threads": threads, "method": f"best FP32 {n}x{n} matmul over {seconds:g} s",
            "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "load_average_1min": os.getloadavg()[0], "cores": os.cpu_count()}
