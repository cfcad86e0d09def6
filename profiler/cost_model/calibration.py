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
    fp8_eff_ratio: float
    """Efficiency of an FP8 GEMM relative to the FP8 datasheet peak, as a share of what a
    BF16 GEMM of the same shape reaches of the BF16 peak (FP8 GEMMs rarely double BF16
    throughput in practice: scaling, amax and layout work in the kernel)."""
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
    "fp8_eff_ratio": (0.4, 1.0),
    "moe_layer_overhead_s": (1e-6, 5e-3),
}
"""Physical ranges the fit stays inside."""

FITTED = Calibration(gemm_eff_max=0.490, gemm_dim_half=852.0, fp8_eff_ratio=0.960, moe_layer_overhead_s=1.65e-4)
"""Fitted on every published row by ``python benchmarks/published.py --fit`` (8 rows). The
large-GEMM share (0.49 x the shape factor, about 0.35 of peak for a Llama-3-8B MLP GEMM)
is lower than cuBLAS reaches alone: it also carries the kernels the model does not list
(launch gaps, norms' fusion misses, dropout/bias, CPU stalls), which scale with the GEMMs."""
