"""GPU presets: peak throughput, memory and interconnect bandwidths.

Numbers are from vendor datasheets (NVIDIA A100/H100/H200/B200/GB200 datasheets: dense
peaks are half the "with sparsity" figures) and DeepEP's published measurements
(https://github.com/deepseek-ai/DeepEP README: intranode EP8 dispatch 153 GB/s,
internode EP16-64 43-58 GB/s on H800 with CX7 400 Gb/s NICs). Bandwidths are one
direction, per GPU, in bytes per second. The H800's NVLink peaks near 160 GB/s, so its 153 GB/s
is the link's; the H100, H200 and H100-HBM2e presets keep it although their NVLink is 2.8x
the H800's (an H20, with the same NVLink, ran DeepEP's intranode test at 337 GB/s: DeepEP issue
#16). ``benchmarks/published_whatif.py`` plans the published runs at that figure; the presets
are not changed until every H100 figure is re-derived with them.

Blackwell presets (b200: HGX/DGX B200, 8 GPUs per NVLink domain; gb200: GB200 NVL72, an
NVLink domain of 72 GPUs, so its cluster files say ``gpus_per_node: 72``): BF16 2.25 /
2.5 PFLOP/s dense, FP8 4.5 / 5 PFLOP/s dense, HBM3e 180 / 186 GB at 8 TB/s, NVLink5
1.8 TB/s bidirectional, ConnectX-7 400 Gb/s per GPU (DGX B200 datasheet; GB200 NVL72
datasheet). No DeepEP figure is published for them: their all-to-all bandwidths are the
H100 ones scaled by the NVLink5/NVLink4 ratio (intranode) and equal (internode, same NIC).

``h100-hbm2e-500w``: the H100 of Meta's Grand Teton hosts that torchtitan's published
benchmarks ran on: 96 GB HBM2e at 2.4 TB/s, run at the default 500 W power limit
(torchtitan docs/performance.md). No datasheet gives this part's peak; the 500 W peak is
interpolated linearly in board power between the H100 NVL datasheet (400 W: 835 BF16 /
1670 FP8 TFLOP/s dense) and the H100 SXM datasheet (700 W: 989 / 1979): 886 / 1773
TFLOP/s. Links as the H100 SXM (NVLink 4, 400 Gb/s RDMA per GPU: torchtitan docs).

``v100``: Tesla V100 SXM2 32 GB (NVIDIA V100 datasheet): 125 TFLOP/s FP16 tensor (no BF16;
the FP16 peak stands in), 900 GB/s HBM2, NVLink 300 GB/s total (150 GB/s one direction).
Its NIC (12.5 GB/s: one 100 Gb/s EDR per GPU) and all-to-all bandwidths (the A100's scaled
by the NVLink and NIC ratios) are assumed: no datasheet or DeepEP figure gives them.

``host_bandwidth`` is the GPU's link to host memory, one direction, what activation
offloading copies over (``profiler.cost_model.offload``): PCIe Gen5 x16 on H100, H800, H200
and B200 (32 GT/s x 16 lanes, 128b/130b: 63 GB/s, PCI-SIG PCIe 5.0 specification; the H100
SXM and DGX B200 datasheets give "PCIe Gen5: 128 GB/s" bidirectional), PCIe Gen4 x16 on A100
(32 GB/s; A100 datasheet "PCIe Gen4: 64 GB/s"), PCIe Gen3 x16 on V100 (16 GB/s), NVLink-C2C
on GB200 (900 GB/s bidirectional between a Grace CPU and the two Blackwell GPUs of its
superchip: GB200 NVL72 datasheet, https://www.nvidia.com/en-us/data-center/gb200-nvl72/;
shared by the two GPUs that all offload at once, 225 GB/s per GPU one direction).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from planner.core.errors import InputError

__all__ = ["GpuSpec", "GPU_PRESETS", "gpu_from_config"]


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One accelerator kind and the links around it."""

    name: str
    """Preset name."""
    peak_flops: float
    """Dense BF16 peak, FLOP/s (the MFU denominator)."""
    memory_bytes: float
    """HBM capacity."""
    hbm_bandwidth: float
    """HBM bandwidth, bytes/s."""
    nvlink_bandwidth: float
    """NVLink point-to-point bandwidth inside a node, one direction, bytes/s."""
    ib_bandwidth: float
    """Network bandwidth per GPU across nodes (one NIC per GPU), bytes/s."""
    a2a_intranode_bandwidth: float
    """Achieved expert-parallel all-to-all bandwidth inside a node (DeepEP EP8), bytes/s."""
    a2a_internode_bandwidth: float
    """Achieved expert-parallel all-to-all bandwidth across nodes (DeepEP EP16-64), bytes/s."""
    p2p_latency_s: float = 10e-6
    """Latency of one pipeline send/receive (kernel launch + network), seconds."""
    fp8_peak_flops: float = 0.0
    """Dense FP8 peak, FLOP/s; 0: no FP8 tensor cores (FP8 GEMMs run at the BF16 peak)."""
    host_bandwidth: float = 63e9
    """GPU-host link, one direction, bytes/s (PCIe Gen5 x16 unless the preset says otherwise)."""


GB = 1e9
GPU_PRESETS: dict[str, GpuSpec] = {
    "a100": GpuSpec(name="a100", peak_flops=312e12, memory_bytes=80 * 2**30, hbm_bandwidth=2.0e12,
                    nvlink_bandwidth=300 * GB, ib_bandwidth=25 * GB,
                    a2a_intranode_bandwidth=100 * GB, a2a_internode_bandwidth=20 * GB, host_bandwidth=32 * GB),
    "h100": GpuSpec(name="h100", peak_flops=989e12, fp8_peak_flops=1979e12, memory_bytes=80 * 2**30,
                    hbm_bandwidth=3.35e12, nvlink_bandwidth=450 * GB, ib_bandwidth=50 * GB,
                    a2a_intranode_bandwidth=153 * GB, a2a_internode_bandwidth=50 * GB),
    "h100-hbm2e-500w": GpuSpec(name="h100-hbm2e-500w", peak_flops=886e12, fp8_peak_flops=1773e12,
                               memory_bytes=96 * GB, hbm_bandwidth=2.4e12, nvlink_bandwidth=450 * GB,
                               ib_bandwidth=50 * GB, a2a_intranode_bandwidth=153 * GB,
                               a2a_internode_bandwidth=50 * GB),
    "h800": GpuSpec(name="h800", peak_flops=989e12, fp8_peak_flops=1979e12, memory_bytes=80 * 2**30,
                    hbm_bandwidth=3.35e12, nvlink_bandwidth=160 * GB, ib_bandwidth=50 * GB,
                    a2a_intranode_bandwidth=153 * GB, a2a_internode_bandwidth=45 * GB),
    "h200": GpuSpec(name="h200", peak_flops=989e12, fp8_peak_flops=1979e12, memory_bytes=141 * GB,
                    hbm_bandwidth=4.8e12, nvlink_bandwidth=450 * GB, ib_bandwidth=50 * GB,
                    a2a_intranode_bandwidth=153 * GB, a2a_internode_bandwidth=50 * GB),
    "b200": GpuSpec(name="b200", peak_flops=2250e12, fp8_peak_flops=4500e12, memory_bytes=180 * GB,
                    hbm_bandwidth=8.0e12, nvlink_bandwidth=900 * GB, ib_bandwidth=50 * GB,
                    a2a_intranode_bandwidth=306 * GB, a2a_internode_bandwidth=50 * GB),
    "gb200": GpuSpec(name="gb200", peak_flops=2500e12, fp8_peak_flops=5000e12, memory_bytes=186 * GB,
                     hbm_bandwidth=8.0e12, nvlink_bandwidth=900 * GB, ib_bandwidth=50 * GB,
                     a2a_intranode_bandwidth=306 * GB, a2a_internode_bandwidth=50 * GB,
                     host_bandwidth=225 * GB),
    "v100": GpuSpec(name="v100", peak_flops=125e12, memory_bytes=32 * 2**30, hbm_bandwidth=0.9e12,
                    nvlink_bandwidth=150 * GB, ib_bandwidth=12.5 * GB,
                    a2a_intranode_bandwidth=50 * GB, a2a_internode_bandwidth=10 * GB, host_bandwidth=16 * GB),
}


def gpu_from_config(value: Any, *, where: str = "cluster.gpu") -> GpuSpec:
    """A preset name, or a mapping ``{preset: NAME, <field>: value, ...}`` / full field set."""
    if isinstance(value, str):
        if value.lower() not in GPU_PRESETS:
            raise InputError(where, f"unknown GPU {value!r}", f"use one of {', '.join(GPU_PRESETS)}")
        return GPU_PRESETS[value.lower()]
    if not isinstance(value, dict):
        raise InputError(where, "expected a preset name or a mapping of GPU fields")
    known = {f.name for f in fields(GpuSpec)}
    base_name = value.get("preset", value.get("name"))
    overrides = {k: v for k, v in value.items() if k != "preset"}
    for key, v in overrides.items():
        if key not in known:
            raise InputError(f"{where}.{key}", "unknown field", f"known fields: {', '.join(sorted(known))}")
        if key != "name" and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0
                              or (v == 0 and key != "fp8_peak_flops")):  # 0: no FP8 (A100), as saved in its plans
            raise InputError(f"{where}.{key}", f"expected a positive number, got {v!r}")
    if isinstance(base_name, str) and base_name.lower() in GPU_PRESETS:
        return replace(GPU_PRESETS[base_name.lower()], **overrides)
    missing = sorted(known - set(overrides) - {"p2p_latency_s", "fp8_peak_flops", "host_bandwidth"})
    if missing:
        raise InputError(f"{where}.{missing[0]}", "missing for a custom GPU",
                         "give every field or start from 'preset: h100'")
    return GpuSpec(**overrides)
