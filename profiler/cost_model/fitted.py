"""The cost model's fitted constants: the few that no datasheet or paper gives.

Everything else in the cost model cites a vendor figure, a paper or a measurement. The
GEMM shape constant ``gemm_dim_half`` comes from the GPU check's measured GEMM rates
(``GEMM_DIM_HALF``); the other three are fitted by ``benchmarks/published.py --fit`` on the
published training runs in ``benchmarks/data/published_runs.json`` and
``benchmarks/data/published/`` only (each row keeps its source URL and table); the
benchmark also plans each source family with constants fitted without it.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from typing import Iterator

__all__ = ["FittedConstants", "FITTED", "BOUNDS", "HBM_EFF", "GEMM_DIM_HALF", "GEMM_FP8_DIM_HALF", "GEMM_FP8_SCALE",
           "active_constants", "using_constants"]

HBM_EFF = 0.8
"""Share of HBM bandwidth a large streaming kernel reaches (STREAM-like copies on H100 reach
about 80-90% of the 3.35 TB/s datasheet figure): the FP8 casts' and the optimizer step's rate,
and the bound of ``FittedConstants.elementwise_eff``."""
GEMM_BF16_SCALE = 1.018
"""The scale of the BF16 shape curve fitted to the H200's measured GEMM rates (below): what a
large BF16 GEMM alone reaches, so the bound of ``gemm_eff_max``, the share a training step keeps."""
GEMM_DIM_HALF = 443.0
"""``gemm_dim_half`` measured, not fitted to training runs: the least-squares fit (in log,
the overall scale free) of ``prod_d d / (d + D)`` to the BF16 GEMM rates of the shipped
models' shapes that ``benchmarks/gpu_check.py`` measured on an H200 (Hopper tensor cores
and clocks as the H100 SXM: ``benchmarks/results/gpu_check_h200.json``, 8 shapes from
128 x 4096 x 7168 to 4096 x 151936 x 2048; the 320 x 1024 x 2048 GEMM, 25 us and
launch-bound, left out): ``gemm.fit_shape_curve`` gives D = 443 at scale 1.018."""
GEMM_FP8_DIM_HALF = 904.0
"""The same fit of the same run's FP8 rates (``torch._scaled_mm``, tensor-scaled E4M3 inputs,
BF16 output; the same 8 shapes): D = 904, scale 1.077. FP8 loses more than BF16 on narrow
GEMMs: its math takes half the time at the same shape while a kernel's prologue, epilogue
(the BF16 output is as wide) and partial last wave do not, so they weigh twice as much. Taken
for every GPU, as the BF16 curve is: no other GPU's FP8 rates were measured."""
GEMM_FP8_SCALE = round(1.0772 / 1.0184, 3)
"""The FP8 curve's scale over the BF16 curve's (1.058), both fitted on the H200 rates above:
an FP8 GEMM's efficiency is ``gemm_eff_max x GEMM_FP8_SCALE x`` its FP8 shape factor, so the
fitted ``gemm_eff_max`` (the share of the measured rate a training step keeps) is one
constant for both precisions."""


@dataclass(frozen=True, kw_only=True)
class FittedConstants:
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

    elementwise_eff: float = HBM_EFF
    """Share of HBM bandwidth a layer's memory-bound work reaches (norms, activations,
    residuals, rotary, gates, token permutation: ``CostContext.mem``). A streaming copy
    reaches ``HBM_EFF``; a training step's many small unfused kernels, their launches and
    the framework's work between them reach less. This time grows with tokens x width, not
    with FLOPs, so a constant of its own keeps ``gemm_eff_max`` from charging a wide layer's
    GEMMs for it (held out, large dense runs came out slow while small ones fitted)."""

    def as_tuple(self) -> tuple[float, ...]:
        """The constants in field order (the fit's parameter vector)."""
        return tuple(getattr(self, f.name) for f in fields(self))

    @classmethod
    def from_tuple(cls, values: tuple[float, ...] | list[float]) -> "FittedConstants":
        """Inverse of ``as_tuple``."""
        return cls(**{f.name: float(v) for f, v in zip(fields(cls), values)})


BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_eff_max": (0.3, GEMM_BF16_SCALE),
    "grouped_gemm_eff": (0.2, 1.0),
    "moe_layer_overhead_s": (1e-6, 5e-3),
    "elementwise_eff": (0.05, HBM_EFF),
}
"""The fitted constants and the physical ranges the fit stays inside (``gemm_dim_half`` is
``GEMM_DIM_HALF``, held fixed)."""

FITTED = FittedConstants(gemm_eff_max=0.5491, gemm_dim_half=GEMM_DIM_HALF, grouped_gemm_eff=1.0,
                     moe_layer_overhead_s=1.104e-03)
"""The shipped constants: three fitted by ``python benchmarks/published.py --fit`` on every published row
that plans (91 of 101: Megatron-Bridge / NeMo 24.07-26.06 on H100, B200 and GB200,
torchtitan Dec 2024 and June 2025, NeMo AutoModel, the Megatron-MoE ModelZoo, MLPerf
Training v5.0, the DeepSeek-V3 report; ``benchmarks/data/published*``), L1 loss in
ln(predicted / published tokens/s/GPU), each row's cluster file as its source states it.
Three constants on 91 rows: one per 30. Two rounds of the fit (each linearised at the
constants the round before gave; the second moved them by under 5%). They were fitted while FP8 GEMMs
took the BF16 shape curve and before element-wise work had a constant of its own, which they
leave at ``HBM_EFF``. With both (2026-12-07) the fit on every row gives ``gemm_eff_max`` 0.819
(a large BF16 GEMM measured 0.81 of peak on the H200), 1.0, 1.49 ms and ``elementwise_eff``
0.195 (docs/published-validation.md, "Element-wise work as its own constant"), and the
leave-one-source-out check validates those four; they are not shipped yet: a refit moves
every analytical figure on every page. The benchmark also plans
every source family with constants fitted without it (leave one source out;
docs/published-validation.md).

A Llama-3-8B MLP GEMM (8192 x 14336 x 4096) comes out at 0.46 of peak where the GPU check
measured 0.8 for large GEMMs alone: in the shipped set the share also carries the work the
model does not list (launch gaps, unfused small kernels, CPU stalls) as if it scaled with the
GEMMs; in the four-constant fit ``elementwise_eff`` carries it, in proportion to tokens x width. Grouped
expert GEMMs reach the efficiency of a dense GEMM of the same per-expert shape (the bound;
0.75 when only eight rows were known: the newer Blackwell and BF16 MoE rows pull it up). The
per-MoE-layer host overhead (1.1 ms in each of forward and backward, without CUDA graphs) is
what separates CUDA-graphed MoE runs from the rest."""


_ACTIVE: ContextVar["FittedConstants | None"] = ContextVar("ppplan_fitted_constants", default=None)


def active_constants() -> FittedConstants:
    """The constants the analytical model uses now: ``FITTED`` unless ``using_constants``
    set others (the published-runs benchmark's held-out folds)."""
    return _ACTIVE.get() or FITTED


@contextmanager
def using_constants(cal: FittedConstants | None) -> Iterator[None]:
    """Cost everything inside the block with ``cal`` (None: ``FITTED``)."""
    token = _ACTIVE.set(cal)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
