"""The cost model's fitted constants: the few that no datasheet or paper gives.

Everything else in the cost model cites a vendor figure or a paper. These constants
are fitted by ``benchmarks/published.py --fit`` on the published training runs in
``benchmarks/data/published_runs.json`` only (Megatron-Bridge / NeMo performance
summaries, torchtitan, NeMo AutoModel; each row keeps its source URL); the benchmark
also reports each row predicted with constants fitted without it (leave-one-out).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Calibration", "FITTED", "BOUNDS"]


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Fitted constants of the analytical model."""

    gemm_eff_max: float
    """Share of peak a large GEMM reaches (cuBLAS/TE on transformer shapes)."""
    gemm_dim_half: float
    """GEMM dimension (rows, columns or depth) at which that dimension halves the efficiency:
    eff = gemm_eff_max x prod_d d / (d + gemm_dim_half) over d in (m, n, k). Narrow expert
    GEMMs (Qwen3-30B-A3B's 768-wide experts) lose more than wide dense ones."""
    grouped_gemm_eff: float
    """Share of a dense GEMM's efficiency a grouped expert GEMM of the same per-expert shape
    reaches: the experts' GEMMs run as one grouped kernel (or a loop of small ones) with
    per-expert tile quantisation and tails, so they fill the GPU less evenly."""
    moe_layer_overhead_s: float
    """Fixed time per MoE layer and microbatch in each of forward and backward: router,
    token permutation bookkeeping, host-device synchronisation of token counts and the
    launches of many small kernels (not proportional to FLOPs or bytes)."""

    def as_tuple(self) -> tuple[float, ...]:
        """The constants in field order (the fit's parameter vector)."""
        return tuple(getattr(self, f.name) for f in fields(self))

    @classmethod
    def from_tuple(cls, values: tuple[float, ...] | list[float]) -> "Calibration":
        """Inverse of ``as_tuple``."""
        return cls(**{f.name: float(v) for f, v in zip(fields(cls), values)})


BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_eff_max": (0.3, 0.95),
    "gemm_dim_half": (1.0, 2048.0),
    "grouped_gemm_eff": (0.2, 1.0),
    "moe_layer_overhead_s": (1e-6, 5e-3),
}
"""Physical ranges the fit stays inside."""

FITTED = Calibration(gemm_eff_max=0.6717, gemm_dim_half=1090.3, grouped_gemm_eff=1.000,
                     moe_layer_overhead_s=1.627e-03)
"""Fitted on every published row (8) by ``python benchmarks/published.py --fit`` (L1 loss),
with the rows' GPUs, kernels and CUDA graphs as the recipes state them (torchtitan's 500 W
HBM2e H100s and eager PyTorch; Megatron-Bridge 26.04's CUDA-graphed MoE router). A Llama-3-8B
MLP GEMM (8192 x 14336 x 4096) comes out at 0.44 of peak, a 4096-cube at 0.33: below what
cuBLAS reaches alone, because the share also carries the work the model does not list
(launch gaps, unfused small kernels, CPU stalls), which scales with the GEMMs. The
grouped-GEMM share came out at its upper bound (1.0): the narrow experts' shape penalty
(gemm_dim_half) already accounts for their slower GEMMs. The per-MoE-layer host overhead
(1.6 ms in each of forward and backward, without CUDA graphs) is what separates the
CUDA-graphed 26.04 Qwen3-30B-A3B run from the rest."""
