"""torchtitan's per-op selective activation checkpointing (``recompute: op``): which outputs
a decoder layer keeps and which matmuls it runs again.

torchtitan wraps each ``TransformerBlock`` in ``torch.utils.checkpoint`` with a policy that
saves the outputs of the ops in ``_save_list`` (``aten.mm``, the SDPA kernels,
``_c10d_functional.reduce_scatter_tensor``, ``aten.max``), "except every second mm", counted
per block in forward order, and recomputes everything else on first use in the backward
(``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370, December 2024, and
``torchtitan/models/llama3/parallelize_llama.py`` at e7c0cae, June 2025: ``_custom_policy``;
``selective_ac_option = "op"`` in the Llama 3 tomls; torchtitan main's ``SelectiveAC`` keeps
the alternation, ``torchtitan/distributed/activation_checkpoint.py``). The block's matmuls run
in its code's order, ``wq, wk, wv`` (``Attention.forward``: ``self.wq(x), self.wk(x),
self.wv(x)``), ``wo``, then ``w1, w3, w2`` (``FeedForward.forward``:
``self.w2(F.silu(self.w1(x)) * self.w3(x))``), so the odd ones, ``wq, wv, w1, w2``, are kept.
What SAC stores is the op's whole output, needed by the backward or not
(``torch/utils/checkpoint.py`` ``_CachingTorchDispatchMode`` stores every MUST_SAVE output),
besides the block's input, which the checkpoint itself holds.

Under torch's tensor parallelism (torchtitan's ``ColwiseParallel`` wq/wk/wv/w1/w3 and
``RowwiseParallel`` wo/w2 with sequence-parallel norms) the row-parallel matmuls output the
whole sequence's partial sums before their reduce-scatter, and both reduce-scatters are kept;
the column-parallel inputs' all-gathers are not in the list, so they run again in the backward.

Only GQA attention without an output gate and a dense SwiGLU are described: torchtitan's MoE
(``_grouped_mm`` experts, a router whose gate matmul main force-recomputes) and MLA order their
matmuls differently from release to release, and ppplan does not model those sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OP", "WHOLE_BACKWARD_FAMILIES", "MATMULS", "ATTENTION_MATMULS", "KEPT", "keeps_matmul", "OpLayer", "op_layer", "op_supported", "shapes"]

OP = "op"
"""The ``training.recompute`` value of torchtitan's per-op selective checkpointing."""

WHOLE_BACKWARD_FAMILIES = ("gpipe", "1f1b", "interleaved")
"""The schedule families an ``op`` plan runs, each backward whole (one B): torch's selective
checkpointing allows one backward per checkpointed region ("Trying to backward an extra time.
You are only allowed to backward once on any region computed under selective activation
checkpoint", ``torch/utils/checkpoint.py``), and a backward split into I and W (torch's
``stage_backward_input`` then ``stage_backward_weight``) runs the region's graph twice. These
families keep W right after its I, so the plan writes the pair as one B."""

MATMULS = ("wq", "wk", "wv", "wo", "w1", "w3", "w2")
"""The block's matmuls in the order torchtitan's Llama/Qwen3 dense block runs them."""

def keeps_matmul(count: int) -> bool:
    """Whether the policy keeps the output of a block's ``count``-th matmul (1-based): "every
    second mm" is recomputed."""
    return count % 2 == 1


ATTENTION_MATMULS = MATMULS[:4]
"""The attention's matmuls (``Attention.forward``); the rest are the MLP's (``FeedForward``)."""

KEPT = tuple(name for i, name in enumerate(MATMULS, start=1) if keeps_matmul(i))
"""The matmuls whose outputs the policy keeps: the odd ones of ``MATMULS`` (wq, wv, w1, w2)."""


@dataclass(frozen=True, kw_only=True)
class OpLayer:
    """Elements one GPU keeps per token of a microbatch, and the matmuls it runs again."""

    kept_per_token: float
    """Kept elements per token (BF16 elements; the attention's FP32 log-sum-exp counted as two)."""
    recomputed: tuple[str, ...]
    """Matmuls run again in the backward (``MATMULS`` less ``KEPT``)."""
    gathers_again: bool
    """Whether the column-parallel inputs' all-gathers run again (tensor parallelism)."""


def shapes(*, hidden: int, q: int, kv: int, ffn: int) -> dict[str, tuple[int, int, bool]]:
    """Each matmul's (output width, input width, row-parallel) in ``MATMULS`` order."""
    return {"wq": (q, hidden, False), "wk": (kv, hidden, False), "wv": (kv, hidden, False),
            "wo": (hidden, q, True), "w1": (ffn, hidden, False), "w3": (ffn, hidden, False),
            "w2": (hidden, ffn, True)}


def op_supported(mixer: str, ffn: str, *, gated: bool) -> bool:
    """Whether ``recompute: op`` is described for a decoder layer of this kind."""
    return mixer == "gqa" and not gated and ffn == "dense"


def op_layer(*, hidden: int, q: int, kv: int, heads: int, ffn: int, tp: int) -> OpLayer:
    """What a GQA + SwiGLU decoder layer keeps under the policy, per token on one GPU:
    the block input (sequence-sharded under tensor parallelism), the kept matmuls' outputs,
    the attention output and its log-sum-exp, and under tensor parallelism the two
    reduce-scatter outputs; a row-parallel matmul's output is the whole hidden width."""
    out = {name: n_out / (1 if row else tp) for name, (n_out, _, row) in shapes(hidden=hidden, q=q, kv=kv, ffn=ffn).items()}
    kept = hidden / tp + sum(out[name] for name in KEPT) + q / tp + 2 * heads / tp
    if tp > 1:
        kept += 2 * hidden / tp  # wo's and w2's reduce-scatter outputs
    return OpLayer(kept_per_token=kept, recomputed=tuple(n for n in MATMULS if n not in KEPT), gathers_again=tp > 1)
