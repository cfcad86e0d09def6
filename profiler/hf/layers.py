"""transformers' decoder layers as ppplan layer programs.

``HfDecoderLayer`` holds one decoder layer of the family's own class (for example
``Qwen3MoeDecoderLayer``, built from the config at the layer's index, so Qwen3-Next's
linear / full attention pattern and DeepSeek's first dense layers come from
transformers) and the family's rotary embedding. Its program follows the layer's own
``forward`` (``models/<family>/modeling_<family>.py``: pre-norm mixer, residual,
post-attention norm, MLP, residual), cut where ppplan's profiler and replay cut a layer
(``profiler.layers.program``):

- dense: one segment, the layer's own ``forward``;
- MoE: attention block and router | dispatch | experts (grouped GEMM) | combine |
  shared expert and residual (``profiler.hf.moe``).

The embedding is ``nn.Embedding`` as in every family's ``*Model.embed_tokens``; the
head is the family's final RMSNorm class and a linear LM head, as in ``*ForCausalLM``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from profiler.hf.moe import HfExperts
from profiler.layers.blocks import Embedding, Head, ProgramModule
from profiler.layers.program import Compute, Ctx, State, Step, moe_steps

__all__ = ["HfDecoderLayer", "HfEmbedding", "HfHead"]


class HfEmbedding(Embedding):
    """Token embedding (``*Model.embed_tokens``), sized from the transformers config."""

    def __init__(self, config: Any) -> None:
        super().__init__(config.vocab_size, config.hidden_size)


class HfHead(Head):
    """Final norm (the family's RMSNorm class) and LM head, returning logits."""

    def __init__(self, config: Any, norm_cls: type[nn.Module]) -> None:
        super().__init__(config.hidden_size, config.vocab_size,
                         norm=norm_cls(config.hidden_size, eps=config.rms_norm_eps))


class HfDecoderLayer(ProgramModule):
    """A transformers decoder layer run as attention | dispatch | experts | combine | post."""

    def __init__(self, layer: nn.Module, rotary: nn.Module, *, ep_group: Any = None) -> None:
        super().__init__()
        self.layer, self.rotary = layer, rotary
        block = layer.mlp
        self.moe = HfExperts(block, ep_group=ep_group) if hasattr(block, "experts") else None

    def _attention(self, x: torch.Tensor) -> torch.Tensor:
        """``x + mixer(input_layernorm(x))`` with causal masking (no mask: SDPA's is_causal)."""
        layer = self.layer
        h = layer.input_layernorm(x)
        if getattr(layer, "block_type", "") == "linear_attention":  # modeling_qwen3_next.py
            return x + layer.linear_attn(hidden_states=h, attention_mask=None)
        positions = torch.arange(x.shape[1], device=x.device)[None]
        out, _ = layer.self_attn(hidden_states=h, attention_mask=None, position_ids=positions,
                                 position_embeddings=self.rotary(h, positions))
        return x + out

    def program(self) -> tuple[Step, ...]:
        if self.moe is None:
            def dense(s: State, c: Ctx) -> State:
                x1 = self._attention(s["x"])
                return {"y": x1 + self.layer.mlp(self.layer.post_attention_layernorm(x1))}
            return (Compute(name="layer", fn=dense, inputs=("x",)),)
        return self._moe_program()

    def _moe_program(self) -> tuple[Step, ...]:
        moe, group = self.moe, self.moe.group

        def route(s: State, c: Ctx) -> State:
            x1 = self._attention(s["x"])
            normed = self.layer.post_attention_layernorm(x1)
            c["shape"] = normed.shape
            send, weights = moe.route(normed.flatten(0, -2), c)
            return {"x1": x1, "normed": normed, "send": send, "weights": weights}

        def finish(s: State, c: Ctx) -> State:
            out = moe.finish(s["back"], s["weights"], s["normed"].flatten(0, -2), c)
            return {"y": s["x1"] + out.view(c["shape"])}

        return moe_steps(route, moe.experts, finish, group, counts=True,
                         finish_inputs=("x1", "normed", "back", "weights"))
