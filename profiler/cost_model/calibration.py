"""The cost model's fitted constants: the few that no datasheet or paper gives.

Everything else in the cost model cites a vendor figure, a paper or a measurement. The
GEMM shape constant ``gemm_dim_half`` comes from the GPU check's measured GEMM rates
(``GEMM_DIM_HALF``); the other three were fitted by ``benchmarks/published.py --fit`` (an earlier version) on
the published training runs in ``benchmarks/data/published_runs.json`` only
(Megatron-Bridge / NeMo performance summaries, torchtitan, NeMo AutoModel; each row keeps
its source URL); the benchmark also reports each row predicted with constants fitted
without it (leave-one-out).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Calibration", "FITTED", "BOUNDS", "GEMM_DIM_HALF"]

GEMM_DIM_HALF = 443.0
"""``gemm_dim_half`` measured, not fitted to training runs: the least-squares fit (in log,
the overall scale free) of ``prod_d d / (d + D)`` to the BF16 GEMM rates of the shipped
models' shapes that ``benchmarks/gpu_check.py`` measured on an H200 (Hopper tensor cores
and clocks as the H100 SXM: ``benchmarks/results/gpu_check_h200.json``, 8 shapes from
128 x 4096 x 7168 to 4096 x 151936 x 2048; the 320 x 1024 x 2048 GEMM, 25 us and
launch-bound, left out)."""


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
    "grouped_gemm_eff": (0.2, 1.0),
    "moe_layer_overhead_s": (1e-6, 5e-3),
}
"""The fitted constants and the physical ranges the fit stays inside (``gemm_dim_half`` is
``GEMM_DIM_HALF``, held fixed)."""

FITTED = Calibration(gemm_eff_max=0.5385, gemm_dim_half=GEMM_DIM_HALF, grouped_gemm_eff=0.7504,
                     moe_layer_overhead_s=1.794e-03)
"""The three fitted constants from every published row (8), ``python benchmarks/published.py
--fit`` (L1 loss), with the rows' GPUs, kernels and CUDA graphs as the recipes state them
(torchtitan's 500 W HBM2e H100s and eager PyTorch; Megatron-Bridge 26.04's CUDA-graphed MoE
router). A Llama-3-8B MLP GEMM (8192 x 14336 x 4096) comes out at 0.45 of peak where the
GPU check measured 0.8 for large GEMMs alone: the share also carries the work the model does
not list (launch gaps, unfused small kernels, CPU stalls), which scales with the GEMMs.
Grouped expert GEMMs run at 0.75 of a dense GEMM of the same per-expert shape (per-expert
tiles and tails). The per-MoE-layer host overhead (1.8 ms in each of forward and backward,
without CUDA graphs) is what separates the CUDA-graphed 26.04 Qwen3-30B-A3B run from the
rest."""
