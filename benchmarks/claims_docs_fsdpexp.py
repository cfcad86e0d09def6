"""Claims of docs/published-validation.md's rows that shard experts with FSDP (NeMo AutoModel's
BF16 parameters and expert sharding) and of the Megatron-Bridge Qwen3-30B-A3B pp 2 x vpp 24
rows (BF16 gradient buffer): each row's predicted optimizer step, peak and ratio to the
published tokens/s/GPU, re-derived by the benchmark the page documents (careful files, shipped
constants, no held-out fold)."""

from __future__ import annotations

import re

from claim_kit import Claim, Page

__all__ = ["CLAIMS"]

_PAGE = "docs/published-validation.md"
_SECTION = "## Rows that shard experts with FSDP"
_AUTOMODEL = ["automodel-20251006-h100-deepseek-v3-256gpu", "automodel-20251006-h100-kimi-k2-256gpu",
              "automodel-20251008-h100-qwen3-30b-a3b-8gpu"]
"""The AutoModel rows: ``param_dtype: bf16``, ``fsdp_experts: ep_shard``."""
_BRIDGE = ["mb-25.11-qwen3-30b-a3b", "mb-25.09-h100-qwen3-30b-a3b-tokendrop-16gpu"]
"""The Megatron-Bridge pp 2 x vpp 24 rows: ``grad_reduce_in_fp32: false``."""


def _command(ids: list[str]) -> str:
    return f"python benchmarks/published.py --rows {','.join(ids)} --ways careful --no-held-out --json"


def _cells(run, row_id: str) -> tuple[str, str, str]:
    """Predicted optimizer step, peak and predicted / published ratio of ``row_id``."""
    got = next(r for r in run.json()["rows"] if r["id"] == row_id)["careful"]
    return got["optimizer_step"], got["peak_gib"], f"{got['ratio']:.2f}"


def _row(row_id: str) -> str:
    """The row's last three cells (after what the run set, the earlier result and the published step)."""
    return rf"^\|\s*{re.escape(row_id)}\s*\|(?:[^|\n]*\|){{3}}([^|\n]*)\|([^|\n]*)\|([^|\n]*)\|$"


def _claims(ids: list[str], prefix: str) -> list[Claim]:
    return [Claim(id=f"{prefix}-{i:02d}", where=f"FSDP-expert rows: {row_id}", command=_command(ids),
                  figure=Page(path=_PAGE, section=_SECTION, pattern=_row(row_id)),
                  measured=lambda run, r=row_id: _cells(run, r))
            for i, row_id in enumerate(ids)]


CLAIMS = _claims(_AUTOMODEL, "published-fsdpexp-automodel") + _claims(_BRIDGE, "published-fsdpexp-bridge")
