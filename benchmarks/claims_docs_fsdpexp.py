"""Claims of docs/published-validation.md's rows that shard experts with FSDP (NeMo AutoModel's
BF16 parameters and expert sharding) and of the Megatron-Bridge Qwen3-30B-A3B pp 2 x vpp 24
rows (BF16 gradient buffer): each row's predicted optimizer step, peak and ratio to the
published tokens/s/GPU, re-derived by the benchmark the page documents (careful files, shipped
constants, no held-out fold)."""

from __future__ import annotations

from claim_outputs import published_row_claims

__all__ = ["CLAIMS"]

_SECTION = "## Rows that shard experts with FSDP"
_AUTOMODEL = ["automodel-20251006-h100-deepseek-v3-256gpu", "automodel-20251006-h100-kimi-k2-256gpu",
              "automodel-20251008-h100-qwen3-30b-a3b-8gpu"]
"""The AutoModel rows: ``param_dtype: bf16``, ``fsdp_experts: ep_shard``."""
_BRIDGE = ["mb-25.11-qwen3-30b-a3b", "mb-25.09-h100-qwen3-30b-a3b-tokendrop-16gpu"]
"""The Megatron-Bridge pp 2 x vpp 24 rows: ``grad_reduce_in_fp32: false``."""


CLAIMS = (published_row_claims(_AUTOMODEL, section=_SECTION, prefix="published-fsdpexp-automodel",
                               where="FSDP-expert rows")
          + published_row_claims(_BRIDGE, section=_SECTION, prefix="published-fsdpexp-bridge", where="FSDP-expert rows"))
