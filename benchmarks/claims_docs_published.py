"""Claims of docs/published-validation.md's rows that ran Megatron's recompute modules: each
row's predicted optimizer step, peak and ratio to the published tokens/s/GPU, re-derived by the
benchmark the page documents (careful files, shipped constants, no held-out fold)."""

from __future__ import annotations

import re

from claim_kit import Claim, Page

__all__ = ["CLAIMS"]

_PAGE = "docs/published-validation.md"
_SECTION = "## Rows that ran Megatron's recompute modules"
_REFUSED = ['modelzoo-20251104-h100-qwen3-235b-a22b-seq16k-cp1', 'modelzoo-20251104-h100-qwen3-235b-a22b-seq32k-cp2', 'modelzoo-20251104-h100-qwen3-235b-a22b-seq64k-cp4', 'modelzoo-20251104-h100-qwen3-235b-a22b-seq128k-cp8']
"""The four long-context rows that the planner's selective set left refused for memory."""
_PLANNED = ['modelzoo-20250527-h100-qwen3-235b-a22b-tp2pp8vpp4ep32-deepep', 'modelzoo-20250527-h100-qwen3-235b-a22b-tp2pp8vpp4ep32-deepep-1f1b-overlap', 'modelzoo-20250527-h100-qwen3-235b-a22b-tp2pp32vpp3ep8-a2a', 'modelzoo-20251104-h100-qwen3-next-80b-a3b-pp4vpp3ep32', 'modelzoo-20260309-h100-qwen3-235b-a22b-tp2pp8vpp4ep32-overlap-cudagraph', 'modelzoo-20260310-gb200-qwen3-235b-a22b-mxfp8-tp1pp4vpp6ep64', 'modelzoo-20260513-gb200-qwen3-235b-a22b-mxfp8-seq128k-cp4', 'megatronlm-20251103-gb200-deepseek-v3-mxfp8-256gpu', 'mb-25.11-gb200-deepseek-v3-bf16-nomtp-256gpu', 'mb-25.11-gb200-deepseek-v3-fp8mx-nomtp-256gpu', 'mb-25.11-b200-deepseek-v3-fp8mx-256gpu', 'mb-26.04-gb200-deepseek-v3-mxfp8-256gpu', 'mb-26.04-b200-deepseek-v3-mxfp8-256gpu']
"""The thirteen rows that planned before and now plan with their run's modules."""


def _command(ids: list[str], jobs: str) -> str:
    return f"python benchmarks/published.py --rows {','.join(ids)} --ways careful --no-held-out{jobs} --json"


def _cells(run, row_id: str) -> tuple[str, str, str]:
    """Predicted optimizer step, peak and predicted / published ratio of ``row_id``."""
    got = next(r for r in run.json()["rows"] if r["id"] == row_id)["careful"]
    return got["optimizer_step"], got["peak_gib"], f"{got['ratio']:.2f}"


def _row(row_id: str) -> str:
    """The row's last three cells (after its modules, the earlier ratio and the published step)."""
    return rf"^\|\s*{re.escape(row_id)}\s*\|(?:[^|\n]*\|){{3}}([^|\n]*)\|([^|\n]*)\|([^|\n]*)\|$"


def _claims(ids: list[str], command: str, prefix: str) -> list[Claim]:
    return [Claim(id=f"{prefix}-{i:02d}", where=f"recompute-module rows: {row_id}", command=command,
                  figure=Page(path=_PAGE, section=_SECTION, pattern=_row(row_id)),
                  measured=lambda run, r=row_id: _cells(run, r))
            for i, row_id in enumerate(ids)]


CLAIMS = (_claims(_REFUSED, _command(_REFUSED, ""), "published-modules-refused")
          + _claims(_PLANNED, _command(_PLANNED, " --jobs 2"), "published-modules"))
