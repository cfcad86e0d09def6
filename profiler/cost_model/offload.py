"""Activation offloading: the bytes that leave a layer's saved activations and the transfer
time the compute does not hide. The one rule the memory model (``act_bytes``,
``work_bytes``) and the stage costs (F, I) both take, through ``profiler.analytical``.

Layer level (``layers:N``, Megatron ``--cpu-offloading-num-layers N``): Transformer Engine's
offload context (transformer_engine/pytorch/cpu_offload.py ``AsyncDoubleBufferGroupOffloadHandler``,
reached from megatron/core/extensions/transformer_engine.py ``get_cpu_offload_context``) copies
every tensor the first N layers save for backward (activations only:
``cpu_offloading_weights`` is False) to pinned host memory on a side stream after each layer's
forward, and prefetches them back one layer ahead in the backward; one layer's tensors are in
flight at a time. Megatron runs it at pp 1 only, so a rank holds every layer: each decoder
layer here keeps ``1 - N / layers`` of its saved bytes (the rank's sum is the N layers' worth
less) and charges ``N / layers`` of one layer's exposed copy.

Fine-grained (``modules:...``, Megatron ``--fine-grained-activation-offloading
--offload-modules``): megatron/core/pipeline_parallel/fine_grained_activation_offload.py
``PipelineOffloadManager`` offloads each named module's input on its own D2H stream and
reloads it on an H2D stream before that module's backward; the last group of each name is
kept on the GPU (``post_warmup_callback``: "Do not offload the last X groups so that the
reloading won't block the computing stream").

Both keep one layer's offloaded tensors on the GPU (in flight, or the last group kept): that
is the layer's transient (``work_bytes``). Copies run over the GPU's host link
(``GpuSpec.host_bandwidth``, a datasheet figure) beside the layer's own compute: only the part
beyond it is exposed (D2H against the forward, H2D against the backward).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.offload import offload_layers, offload_modules

__all__ = ["OffloadTerm", "module_input_bytes", "offload_term"]


@dataclass(frozen=True, kw_only=True)
class OffloadTerm:
    """What offloading changes for one decoder layer and microbatch."""

    keep: float = 1.0
    """Share of the layer's saved bytes (other than ``moved``) that stays on the GPU."""
    moved: float = 0.0
    """Bytes moved to the host per offloaded layer (those leave ``act_bytes`` entirely)."""
    moved_w: float = 0.0
    """Of those, matmul inputs (kept until the weight gradient)."""
    resident: float = 0.0
    """Bytes of one layer kept on the GPU anyway (in flight or the last group): the transient."""
    f_s: float = 0.0
    """Exposed forward seconds (D2H beyond the forward's compute)."""
    b_s: float = 0.0
    """Exposed backward seconds (H2D beyond the backward's compute)."""


def module_input_bytes(names: tuple[str, ...], *, local_h: float, copies_h: float, copies_2inter: float,
                       bpe: float, fp8_inputs: bool) -> tuple[float, float]:
    """(bytes, of which matmul-input bytes) of the inputs of Megatron's offload modules ``names``
    for one layer and microbatch (transformer_config.py ``offload_modules``): ``attn_norm`` and
    ``mlp_norm`` take the residual stream (``local_h`` elements, BF16), ``qkv_linear`` the norm's
    output and ``expert_fc1`` the permuted token copies (matmul inputs: FP8 where Transformer
    Engine keeps the FP8 cast), ``moe_act`` the first expert GEMM's gate and up outputs (BF16)."""
    mm = 1.0 if fp8_inputs else bpe
    sizes = {"attn_norm": (local_h * bpe, 0.0), "mlp_norm": (local_h * bpe, 0.0),
             "qkv_linear": (local_h * mm, local_h * mm), "expert_fc1": (copies_h * mm, copies_h * mm),
             "moe_act": (copies_2inter * bpe, 0.0)}
    picked = [sizes[n] for n in names]
    return sum(b for b, _ in picked), sum(w for _, w in picked)


def offload_term(mode: str, *, act: float, act_w: float, decoders: int, host_bandwidth: float,
                 f_s: float, b_s: float, modules: tuple[float, float] = (0.0, 0.0)) -> OffloadTerm:
    """The ``OffloadTerm`` of a decoder layer saving ``act`` bytes (``act_w`` of them matmul
    inputs) with ``f_s`` forward and ``b_s`` backward compute seconds, under ``mode``
    (``planner.core.offload``); ``modules`` is ``module_input_bytes`` for the fine-grained form."""
    n = offload_layers(mode)
    if n:
        share = n / decoders
        copy = act / host_bandwidth
        return OffloadTerm(keep=1.0 - share, resident=act, f_s=share * max(0.0, copy - f_s),
                           b_s=share * max(0.0, copy - b_s))
    if offload_modules(mode):
        moved = min(modules[0], act)
        moved_w = min(modules[1], act_w, moved)
        copy = moved / host_bandwidth
        return OffloadTerm(moved=moved, moved_w=moved_w, resident=moved, f_s=max(0.0, copy - f_s),
                           b_s=max(0.0, copy - b_s))
    return OffloadTerm()
