"""GEMM time by shape, BF16 or FP8.

``time = flops / (peak x eff)``, with ``eff = E x S_p x prod_d d / (d + D_p)`` over the
three dimensions d in (m, n, k) of the GEMM (``shape_factor``): a GEMM narrow in any
dimension fills fewer tensor-core tiles and amortises less of its prologue/epilogue. The
form is the usual saturating tile-utilisation curve (e.g. NVIDIA "Matrix Multiplication
Background User's Guide": efficiency grows with each dimension until the tiles are full).
E (``gemm_eff_max``) is fitted on published runs (``fitted``) and is the same for both
precisions; the shape constant D_p and the precision's scale S_p (1 for BF16) are measured:
``fit_shape_curve`` on the GPU check's GEMM rates (``fitted.GEMM_DIM_HALF``,
``fitted.GEMM_FP8_DIM_HALF``, ``fitted.GEMM_FP8_SCALE``). FP8 needs wider GEMMs than BF16
to reach its (twice as high) peak: on the H200 a 4096-row GEMM of Qwen3-30B-A3B's experts
reaches 0.52 of the BF16 peak and 0.31 of the FP8 one.

FP8 (``precision: fp8``): the GEMMs of the transformer blocks (QKV/output projections,
MLP, routed and shared experts) run at the GPU's FP8 peak; the attention core, router,
embedding and output head stay BF16 (DeepSeek-V3 report, arXiv:2412.19437 section
3.3.1; Transformer Engine keeps the output layer and attention in BF16). Every FP8 GEMM
first casts its activation input (memory bound): Transformer Engine (``fp8_recipe: te``)
fuses the scale into the kernel that produced the input, so the cast reads 2 bytes and
writes 1 per element; torchao's dynamic scaling (``torchao``: ``hp_tensor_to_float8_dynamic``
in torchao/float8/float8_scaling_utils.py) first reads the input once for its amax, then
casts it: 5 bytes per element (``FP8_CAST_BYTES``).

torchao's rowwise recipe (``torchao_rowwise``: ``Float8LinearConfig.from_recipe_name("rowwise")``,
torchao/float8/config.py: every operand scaled per row, ``ScalingGranularity.AXISWISE``)
casts the same bytes per element, plus a second axiswise cast of each operand along the
other dimension for the backward GEMMs, and runs the row-scaled ``torch._scaled_mm`` kernel,
slower than cuBLAS's tensor-scaled one. Its GEMM time keeps ``ROWWISE_SAVING_SHARE`` of
what the tensorwise recipe saves over BF16 (``rowwise_seconds``), the share torchao measured.
"""

from __future__ import annotations

import math

from profiler.cost_model.fitted import GEMM_FP8_DIM_HALF, GEMM_FP8_SCALE, FittedConstants

__all__ = ["gemm_efficiency", "gemm_seconds", "rowwise_seconds", "shape_factor", "fit_shape_curve",
           "FP8_CAST_BYTES", "ROWWISE_SAVING_SHARE"]

FP8_CAST_BYTES = {"te": 3.0, "torchao": 5.0, "torchao_rowwise": 5.0}
"""HBM bytes per element of an FP8 GEMM's activation input to scale and cast it (module doc)."""
ROWWISE_SAVING_SHARE = (1 - 6150 / 6768) / (1 - 6150 / 7689.5)
"""Share of the tensorwise recipe's step-time saving over BF16 that torchao's rowwise recipe
keeps (0.456): torchao's own training benchmark, Llama3-8B on 8 H100, torch.compile, FSDP2,
per-op SAC, torchtitan (torchao/float8/README.md, "Training benchmarks": BF16 6150,
tensorwise 7689.5, rowwise 6768 median tokens/s;
https://github.com/pytorch/ao/blob/main/torchao/float8/README.md). Only the linears
change between the three runs, so the saving is the GEMMs' and their casts' (the
tensorwise run's float8 FSDP all-gather also moves half the bytes, counted in here too)."""


def shape_factor(m: float, n: float, k: float, dim_half: float, scale: float = 1.0) -> float:
    """``scale x prod_d d / (d + dim_half)`` over the GEMM's three dimensions: the curve.
    Multiplied left to right from the scale, as the cost model always has: a changed last bit
    moves the search's ties, and with them the golden plans."""
    return scale * (m / (m + dim_half)) * (n / (n + dim_half)) * (k / (k + dim_half))


def gemm_efficiency(m: float, n: float, k: float, cal: FittedConstants, *, fp8: bool = False) -> float:
    """Share of the precision's peak a GEMM of shape (m x k) @ (k x n) reaches."""
    if fp8:
        return shape_factor(m, n, k, GEMM_FP8_DIM_HALF, cal.gemm_eff_max * GEMM_FP8_SCALE)
    return shape_factor(m, n, k, cal.gemm_dim_half, cal.gemm_eff_max)


def fit_shape_curve(points: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """(scale, D) minimising sum (ln share - ln(scale x shape_factor(m, n, k, D)))^2 over
    ``points`` of (m, n, k, measured share of peak); D on a grid of whole numbers 1-4000
    (the scale, the mean log residual, is closed-form at each D)."""
    if not points:
        raise ValueError("fit_shape_curve needs at least one measured GEMM")
    best = (math.inf, 1.0, 1.0)
    for d in range(1, 4001):
        res = [math.log(s) - math.log(shape_factor(m, n, k, d)) for m, n, k, s in points]
        ln_scale = sum(res) / len(res)
        sse = sum((r - ln_scale) ** 2 for r in res)
        if best is None or sse < best[0]:
            best = (sse, math.exp(ln_scale), float(d))
    return best[1], best[2]


def gemm_seconds(flops: float, m: float, n: float, k: float, *, peak: float, cal: FittedConstants,
                 fp8: bool = False, cast_seconds_per_byte: float = 0.0,
                 cast_bytes: float = FP8_CAST_BYTES["te"]) -> float:
    """Seconds for ``flops`` of GEMMs of shape (m, n, k) at ``peak`` (the precision's: ``fp8``
    takes the FP8 curve); ``cast_seconds_per_byte`` > 0 charges the FP8 input cast
    (``cast_bytes`` per input element)."""
    if flops <= 0 or m <= 0:
        return 0.0
    cast = cast_bytes * flops / (2.0 * n) * cast_seconds_per_byte if cast_seconds_per_byte else 0.0
    return flops / (peak * gemm_efficiency(m, n, k, cal, fp8=fp8)) + cast


def rowwise_seconds(bf16_s: float, tensorwise_s: float) -> float:
    """Seconds of a GEMM under torchao's rowwise recipe, from the same GEMM's BF16 time and
    its tensorwise FP8 time (cast included): BF16 less ``ROWWISE_SAVING_SHARE`` of the saving."""
    return bf16_s - ROWWISE_SAVING_SHARE * (bf16_s - tensorwise_s)
