"""Per-microbatch costing context: one model on one cluster at one micro-batch size.

It turns FLOPs and bytes into seconds with the parts of the cost model (``gemm``,
``comm``) and knows the per-GPU token counts the parallel degrees leave:

- ``tokens``: tokens of the microbatch one GPU's GEMMs see, ``mbs x seq_len / cp``
  (context parallelism splits the sequence; tensor parallelism splits the GEMMs'
  columns, and with sequence parallelism all-gathers the rows back first);
- ``local``: tokens one GPU holds between GEMMs (norms, residuals, the dispatcher's
  input), ``tokens / tp`` (sequence parallelism).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.cluster import ClusterSpec
from planner.core.model import ModelSpec
from profiler.cost_model.fitted import HBM_EFF, FittedConstants
from profiler.cost_model.comm import a2a_seconds, link_bandwidth, ring_seconds
from profiler.cost_model.gemm import FP8_CAST_BYTES, gemm_seconds, rowwise_seconds

__all__ = ["CostContext", "HBM_EFF", "FP8_SCALE_BYTES", "EAGER_SLOWDOWN"]

EAGER_SLOWDOWN = 6667 / 5762
"""Compute time of PyTorch eager mode over fused kernels (``training.kernels: eager``): the
measured step-time ratio of Llama 3.1 8B on 8 H100 with FSDP, eager vs torch.compile, the
same run otherwise (torchtitan docs/performance.md, Table 1: 5,762 vs 6,667 tokens/s/GPU).
torch.compile fuses the element-wise operations eager runs one kernel each (RMSNorm,
SwiGLU, rotary, residuals); the model does not count those kernels' bytes, so the measured
ratio scales the GEMMs and element-wise work and leaves communication alone (the attention
core has its own eager kernel: ``cost_model.mixer``)."""
FP8_SCALE_BYTES = 4 / 128
"""FP8 dispatch: one fp32 scale per 128 elements (DeepSeek-V3 report, section 3.3.2: 1x128 tiles)."""


@dataclass(frozen=True)
class CostContext:
    """What every layer's costing needs."""

    model: ModelSpec
    cluster: ClusterSpec
    tokens: float
    """Tokens per microbatch one GPU's GEMMs see (mbs x seq_len / cp)."""
    cal: FittedConstants

    @property
    def bpe(self) -> int:
        """Bytes of a BF16/FP16 activation element (FP8 training keeps activations BF16 between GEMMs)."""
        return 2

    @property
    def fp8(self) -> bool:
        """Whether block GEMMs run in FP8."""
        return self.cluster.training.precision == "fp8"

    @property
    def fp8_saves_inputs(self) -> bool:
        """Whether the FP8 recipe keeps its FP8 copies of matmul inputs for the backward
        (Transformer Engine); torchao saves the BF16 inputs (``matmul_with_hp_or_float8_args``
        saves ``input_hp``, torchao/float8/float8_linear.py) and casts them again."""
        return self.fp8 and self.cluster.training.fp8_recipe == "te"

    @property
    def attention_kernel(self) -> str:
        """The attention core's kernel (``mixer.FLASH_EFF`` key): the cluster's, or by
        ``kernels`` (fused: cudnn, eager: flash2)."""
        t = self.cluster.training
        if t.attention_kernel != "auto":
            return t.attention_kernel
        return "cudnn" if t.kernels == "fused" else "flash2"

    @property
    def cross_entropy(self) -> str:
        """How the loss runs (``analytical.LOSS_WORK_BYTES`` key): the cluster's, or by
        ``kernels`` (fused: fused, eager: eager; ``compiled`` only when the file says so)."""
        t = self.cluster.training
        return t.cross_entropy if t.cross_entropy != "auto" else t.kernels

    @property
    def compute_scale(self) -> float:
        """Slowdown of every compute kernel: ``EAGER_SLOWDOWN`` in eager mode, else 1."""
        return EAGER_SLOWDOWN if self.cluster.training.kernels == "eager" else 1.0

    @property
    def tp(self) -> int:
        return self.cluster.parallel.tp

    @property
    def ep(self) -> int:
        return self.cluster.parallel.ep

    @property
    def local(self) -> float:
        """Tokens one GPU holds between GEMMs (sequence parallel)."""
        return self.tokens / self.tp

    def gemm(self, flops: float, m: float, n: float, k: float, *, block: bool = True,
             grouped: bool = False) -> float:
        """GEMM seconds; ``block`` GEMMs run in FP8 when the recipe does; ``grouped`` ones
        (routed experts) at ``FittedConstants.grouped_gemm_eff`` of a dense GEMM's efficiency;
        torchao's rowwise recipe between BF16 and tensorwise FP8 (``gemm.rowwise_seconds``)."""
        gpu = self.cluster.gpu
        share = self.cal.grouped_gemm_eff if grouped else 1.0
        bf16 = gemm_seconds(flops, m, n, k, peak=gpu.peak_flops * share, cal=self.cal)
        if block and self.fp8 and gpu.fp8_peak_flops:
            recipe = self.cluster.training.fp8_recipe
            fp8 = gemm_seconds(flops, m, n, k, peak=gpu.fp8_peak_flops * share, cal=self.cal, fp8=True,
                               cast_seconds_per_byte=1.0 / (gpu.hbm_bandwidth * HBM_EFF),
                               cast_bytes=FP8_CAST_BYTES[recipe])
            return self.compute_scale * (rowwise_seconds(bf16, fp8) if recipe == "torchao_rowwise" else fp8)
        return self.compute_scale * bf16

    def mem(self, nbytes: float) -> float:
        """Seconds of memory-bound work moving ``nbytes``, at ``FittedConstants.elementwise_eff``
        of the HBM bandwidth."""
        return self.compute_scale * nbytes / (self.cluster.gpu.hbm_bandwidth * self.cal.elementwise_eff)

    def dispatch(self, tokens: float) -> float:
        """One dispatch all-to-all of ``tokens`` local tokens (FP8 when the dispatcher can)."""
        h = self.model.hidden
        fp8 = self.fp8 and self.cluster.network.kind.fp8_dispatch
        return a2a_seconds(self.cluster, self.model, tokens, h * (1 + FP8_SCALE_BYTES) if fp8 else h * self.bpe)

    def combine(self, tokens: float) -> float:
        """One combine all-to-all (always BF16: DeepSeek-V3 report, section 3.3.2)."""
        return a2a_seconds(self.cluster, self.model, tokens, self.model.hidden * self.bpe)

    def tp_comm(self) -> float:
        """Two all-gathers + two reduce-scatters of the microbatch's hidden states."""
        nbytes = self.tokens * self.model.hidden * self.bpe
        return 4 * ring_seconds(nbytes, self.tp, link_bandwidth(self.cluster, self.tp))

    def etp_comm(self, copies: float) -> float:
        """All-gather + reduce-scatter of the expert tokens inside the expert-TP group."""
        etp = self.cluster.parallel.etp
        nbytes = copies * etp * self.model.hidden * self.bpe
        return 2 * ring_seconds(nbytes, etp, link_bandwidth(self.cluster, etp))

    def cp_comm(self, kv_elems_per_token: float) -> float:
        """Ring-attention K/V passing of one forward: cp - 1 steps of the local K/V chunk."""
        par = self.cluster.parallel
        if par.cp == 1:
            return 0.0
        nbytes = self.tokens * kv_elems_per_token * self.bpe / self.tp
        return (par.cp - 1) * nbytes / link_bandwidth(self.cluster, par.tp * par.cp)
