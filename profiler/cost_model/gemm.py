"""GEMM time by shape, BF16 or FP8.

``time = flops / (peak x eff)``, with ``eff = E x prod_d d / (d + D)`` over the three
dimensions d in (m, n, k) of the GEMM: a GEMM narrow in any dimension fills fewer
tensor-core tiles and amortises less of its prologue/epilogue. E (``gemm_eff_max``) and
D (``gemm_dim_half``) are fitted on published runs (``fitted``); the form is the
usual saturating tile-utilisation curve (e.g. NVIDIA "Matrix Multiplication Background
User's Guide": efficiency grows with each dimension until the tiles are full).

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

from profiler.cost_model.fitted import FittedConstants

__all__ = ["gemm_efficiency", "gemm_seconds", "rowwise_seconds", "FP8_CAST_BYTES", "ROWWISE_SAVING_SHARE"]

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


def gemm_efficiency(m: float, n: float, k: float, cal: FittedConstants) -> float:
    """Share of peak a GEMM of shape (m x k) @ (k x n) reaches."""
    d = cal.gemm_dim_half
    return cal.gemm_eff_max * (m / (m + d)) * (n / (n + d)) * (k / (k + d))


def gemm_seconds(flops: float, m: float, n: float, k: float, *, peak: float, cal: FittedConstants,
                 cast_seconds_per_byte: float = 0.0, cast_bytes: float = FP8_CAST_BYTES["te"]) -> float:
    """Seconds for ``flops`` of GEMMs of shape (m, n, k) at ``peak``; with FP8,
    ``cast_seconds_per_byte`` > 0 charges the input cast (``cast_bytes`` per input element)."""
    if flops <= 0 or m <= 0:
        return 0.0
    cast = cast_bytes * flops / (2.0 * n) * cast_seconds_per_byte if cast_seconds_per_byte else 0.0
    return flops / (peak * gemm_efficiency(m, n, k, cal)) + cast


def rowwise_seconds(bf16_s: float, tensorwise_s: float) -> float:
    """Seconds of a GEMM under torchao's rowwise recipe, from the same GEMM's BF16 time and
    its tensorwise FP8 time (cast included): BF16 less ``ROWWISE_SAVING_SHARE`` of the saving."""
    return bf16_s - ROWWISE_SAVING_SHARE * (bf16_s - tensorwise_s)
