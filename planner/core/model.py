"""Model specification: the layer sequence a pipeline is cut from.

A ``ModelSpec`` is built from a Hugging Face ``config.json`` (see
``planner.core.hf_config``). The embedding and the loss head are layers of their own,
so a partition can give stage 0 fewer decoder layers to make room for the
embedding, and the last stage fewer for the head.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "AttentionSpec",
    "MlaSpec",
    "LinearAttentionSpec",
    "MoeSpec",
    "LayerSpec",
    "ModelSpec",
    "ROLES",
    "ROLE_LETTERS",
    "MIXERS",
    "FFNS",
]

ROLES = ("embedding", "decoder", "mtp", "head")
"""Layer roles, in Megatron layout letters: E, t, m, L."""
ROLE_LETTERS = {"embedding": "E", "decoder": "t", "mtp": "m", "head": "L"}
"""Role -> letter of Megatron's ``--pipeline-model-parallel-layout`` (megatron/core/transformer/
pipeline_parallel_layer_layout.py: E embedding, t decoder layer, m MTP layer, L loss)."""
MIXERS = ("gqa", "mla", "linear")
"""Token mixers: grouped-query full attention, multi-head latent attention, gated linear attention."""
FFNS = ("dense", "moe")
"""Feed-forward kinds: SwiGLU MLP or mixture of experts."""


@dataclass(frozen=True, kw_only=True)
class AttentionSpec:
    """Grouped-query attention dimensions."""

    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """Key/value heads (GQA groups)."""
    head_dim: int
    """Per-head dimension (Qwen3: heads x head_dim != hidden)."""


@dataclass(frozen=True, kw_only=True)
class MlaSpec:
    """DeepSeek multi-head latent attention dimensions."""

    num_heads: int
    """Query heads."""
    q_lora_rank: int
    """Rank of the query down-projection."""
    kv_lora_rank: int
    """Rank of the compressed key/value latent."""
    qk_nope_head_dim: int
    """Per-head query/key dimension without rotary embedding."""
    qk_rope_head_dim: int
    """Per-head query/key dimension with rotary embedding (the key part is shared)."""
    v_head_dim: int
    """Per-head value dimension."""


@dataclass(frozen=True, kw_only=True)
class LinearAttentionSpec:
    """Gated DeltaNet (Qwen3-Next linear attention) dimensions."""

    num_key_heads: int
    """Key/query heads."""
    key_head_dim: int
    """Key/query head dimension."""
    num_value_heads: int
    """Value heads (the recurrent state is key_head_dim x value_head_dim per value head)."""
    value_head_dim: int
    """Value head dimension."""
    conv_kernel: int
    """Short causal convolution width over q, k, v."""


@dataclass(frozen=True, kw_only=True)
class MoeSpec:
    """Mixture-of-experts dimensions."""

    num_experts: int
    """Routed experts."""
    top_k: int
    """Experts each token is sent to."""
    expert_intermediate: int
    """SwiGLU intermediate size of one routed expert."""
    shared_intermediate: int = 0
    """Total SwiGLU intermediate size of the shared expert(s); 0 when there is none."""
    shared_gate: bool = False
    """Whether the shared expert output is scaled by a sigmoid gate (Qwen3-Next)."""
    expert_groups: int = 0
    """Groups the experts are split into for node-limited routing (DeepSeek-V3 ``n_group``); 0: none."""
    groups_per_token: int = 0
    """Groups one token may reach (DeepSeek-V3 ``topk_group``: at most 4 nodes); 0: no limit."""


@dataclass(frozen=True, kw_only=True)
class LayerSpec:
    """One schedulable layer of the model."""

    index: int
    """Position in the layer sequence (0 = embedding)."""
    role: str
    """One of ``ROLES``."""
    mixer: str | None = None
    """One of ``MIXERS`` for decoder and MTP layers, else None."""
    ffn: str | None = None
    """One of ``FFNS`` for decoder and MTP layers, else None."""

    @property
    def type_key(self) -> str:
        """Name of the layer type; layers of one type have identical costs (before routing)."""
        if self.role in ("embedding", "head"):
            return self.role
        body = f"{self.mixer}+{self.ffn}"
        return body if self.role == "decoder" else f"mtp:{body}"

    @property
    def is_moe(self) -> bool:
        """True when the layer has routed experts (and so expert-parallel all-to-all)."""
        return self.ffn == "moe"


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A transformer as a sequence of layers plus the dimensions needed to cost them."""

    name: str
    """Model id (shipped id or the config's directory name)."""
    hidden: int
    """Residual stream width."""
    vocab: int
    """Vocabulary size."""
    intermediate: int
    """SwiGLU intermediate size of dense layers."""
    attention: AttentionSpec | None = None
    """Full-attention dimensions (GQA layers)."""
    mla: MlaSpec | None = None
    """MLA dimensions (DeepSeek-V3)."""
    linear: LinearAttentionSpec | None = None
    """Linear-attention dimensions (Qwen3-Next)."""
    moe: MoeSpec | None = None
    """Expert dimensions, when any layer is MoE."""
    tie_embeddings: bool = False
    """Whether the LM head shares the embedding matrix."""
    layers: tuple[LayerSpec, ...] = field(default_factory=tuple)
    """Embedding, decoder layers, MTP layers, loss head, in pipeline order."""

    @property
    def num_layers(self) -> int:
        """Number of schedulable layers, embedding and head included."""
        return len(self.layers)

    @property
    def num_decoder_layers(self) -> int:
        """Transformer blocks (decoder role only)."""
        return sum(1 for layer in self.layers if layer.role == "decoder")

    @property
    def is_moe(self) -> bool:
        """True when at least one layer is MoE."""
        return any(layer.is_moe for layer in self.layers)

    def type_keys(self) -> list[str]:
        """Distinct layer types in order of first appearance."""
        return list(dict.fromkeys(layer.type_key for layer in self.layers))

    @property
    def layout(self) -> str:
        """One Megatron layout letter per layer (``ROLE_LETTERS``), e.g. ``Ettt...tL``."""
        return "".join(ROLE_LETTERS[layer.role] for layer in self.layers)
