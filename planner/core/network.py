"""The network a cluster file states: expert-parallel dispatcher and link bandwidths.

A cluster's ``network`` section names the MoE token dispatcher (a framework choice that
decides how all-to-all bytes travel and how many SMs it takes from compute) and may
override the GPU preset's link bandwidths. Dispatchers:

- ``alltoall``: NCCL ``all_to_all`` (Megatron ``--moe-token-dispatcher-type alltoall``).
  Every token copy crosses the network on its own (no per-node deduplication); NCCL's
  kernels share the SMs with compute: overlapped compute slows by about 19% on average
  (the A100/H100/MI250 overlap study quoted in profiler/overlap_dag.py).
- ``deepep``: DeepEP (https://github.com/deepseek-ai/DeepEP, Megatron ``flex`` dispatcher):
  a token goes once over RDMA to each destination node and is forwarded over NVLink
  there (DeepSeek-V3 report, arXiv:2412.19437 section 3.2.2); it reserves 20 of 132 SMs
  (same report: "only 20 SMs"), so overlapped compute loses 20/132 of the GPU; FP8
  dispatch (1 byte per element plus one fp32 scale per 128), BF16 combine.
- ``hybridep``: NVIDIA's HybridEP (Megatron-Core ``flex`` backend, 2025): the same
  deduplicating, NVLink-forwarding data path as DeepEP. No H100 bandwidth or SM count is
  published for it, so it takes DeepEP's figures (an assumption, stated).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.core.errors import InputError

__all__ = ["NetworkSpec", "Dispatcher", "DISPATCHERS", "network_from_config"]


@dataclass(frozen=True, kw_only=True)
class Dispatcher:
    """How one dispatcher moves expert-parallel tokens."""

    name: str
    """Dispatcher name."""
    dedup_per_node: bool
    """A token crosses the network once per destination node (forwarded over NVLink there)."""
    sm_share: float
    """Share of the GPU's compute it occupies while it runs (slows overlapped compute)."""
    fp8_dispatch: bool
    """Dispatch moves FP8 (1 byte + a 4-byte scale per 128 elements) when training in FP8."""


DISPATCHERS: dict[str, Dispatcher] = {
    "alltoall": Dispatcher(name="alltoall", dedup_per_node=False, sm_share=0.19, fp8_dispatch=False),
    "deepep": Dispatcher(name="deepep", dedup_per_node=True, sm_share=20 / 132, fp8_dispatch=True),
    "hybridep": Dispatcher(name="hybridep", dedup_per_node=True, sm_share=20 / 132, fp8_dispatch=True),
}


@dataclass(frozen=True, kw_only=True)
class NetworkSpec:
    """A cluster's ``network`` section."""

    dispatcher: str = "alltoall"
    """MoE token dispatcher: alltoall (NCCL), deepep or hybridep."""
    nvlink_gbps: float = 0.0
    """NVLink bandwidth per GPU inside a node, one direction, GB/s; 0: the GPU preset's."""
    network_gbps: float = 0.0
    """Network (NIC) bandwidth per GPU across nodes, one direction, GB/s; 0: the GPU preset's."""
    description: str = ""
    """Free text: the fabric (e.g. '8x 400 Gb/s InfiniBand NDR per node, rail-optimised')."""

    @property
    def kind(self) -> Dispatcher:
        """The dispatcher's data path."""
        return DISPATCHERS[self.dispatcher]


def network_from_config(value: Any, *, where: str = "cluster.network") -> NetworkSpec:
    """Build and check a ``NetworkSpec`` from a parsed mapping (absent: NCCL, preset links)."""
    if value is None:
        return NetworkSpec()
    if not isinstance(value, dict):
        raise InputError(where, "expected a mapping like {dispatcher: deepep, network_gbps: 50}")
    known = ("dispatcher", "nvlink_gbps", "network_gbps", "description")
    for key, v in value.items():
        if key not in known:
            raise InputError(f"{where}.{key}", "unknown field", f"known fields: {', '.join(known)}")
        if key in ("nvlink_gbps", "network_gbps") and (
                isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v != v or v == float("inf")):
            raise InputError(f"{where}.{key}", f"expected a positive number of GB/s (0: the GPU preset's), got {v!r}",
                             "give one direction per GPU, e.g. 50 for a 400 Gb/s NIC")
        if key in ("dispatcher", "description") and not isinstance(v, str):
            raise InputError(f"{where}.{key}", f"expected a string, got {v!r}")
    if value.get("dispatcher", "alltoall") not in DISPATCHERS:
        raise InputError(f"{where}.dispatcher", f"unknown {value['dispatcher']!r}",
                         f"use one of {', '.join(DISPATCHERS)}")
    return NetworkSpec(**{k: (float(v) if k.endswith("gbps") else v) for k, v in value.items()})
