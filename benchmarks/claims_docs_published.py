"""Claims of docs/published-validation.md's rows that ran Megatron's recompute modules: each
row's predicted optimizer step, peak and ratio to the published tokens/s/GPU, re-derived by the
benchmark the page documents (careful files, shipped constants, no held-out fold)."""

from __future__ import annotations

from claim_outputs import history, published_row_claims

__all__ = ["CLAIMS"]

_PAGE_PATH = "docs/published-validation.md"
_SECTION = "## Rows that ran Megatron's recompute modules"
_REFUSED = ['modelzoo-20251104-h100-qwen3-235b-a22b-seq16k-cp1', 'modelzoo-20251104-h100-qwen3-235b-a22b-seq32k-cp2', 'modelzoo-20251104-h100-qwen3-235b-a22b-seq64k-cp4', 'modelzoo-20251104-h100-qwen3-235b-a22b-seq128k-cp8']
"""The four long-context rows that the planner's selective set left refused for memory."""
_PLANNED = ['modelzoo-20250527-h100-qwen3-235b-a22b-tp2pp8vpp4ep32-deepep', 'modelzoo-20250527-h100-qwen3-235b-a22b-tp2pp8vpp4ep32-deepep-1f1b-overlap', 'modelzoo-20250527-h100-qwen3-235b-a22b-tp2pp32vpp3ep8-a2a', 'modelzoo-20251104-h100-qwen3-next-80b-a3b-pp4vpp3ep32', 'modelzoo-20260309-h100-qwen3-235b-a22b-tp2pp8vpp4ep32-overlap-cudagraph', 'modelzoo-20260310-gb200-qwen3-235b-a22b-mxfp8-tp1pp4vpp6ep64', 'modelzoo-20260513-gb200-qwen3-235b-a22b-mxfp8-seq128k-cp4', 'megatronlm-20251103-gb200-deepseek-v3-mxfp8-256gpu', 'mb-25.11-gb200-deepseek-v3-bf16-nomtp-256gpu', 'mb-25.11-gb200-deepseek-v3-fp8mx-nomtp-256gpu', 'mb-25.11-b200-deepseek-v3-fp8mx-256gpu', 'mb-26.04-gb200-deepseek-v3-mxfp8-256gpu', 'mb-26.04-b200-deepseek-v3-mxfp8-256gpu']
"""The thirteen rows that planned before and now plan with their run's modules."""


CLAIMS = (published_row_claims(_REFUSED, section=_SECTION, prefix="published-modules-refused",
                               where="recompute-module rows")
          + published_row_claims(_PLANNED, section=_SECTION, prefix="published-modules", where="recompute-module rows",
                                 jobs=2))

CLAIMS.append(history("published-all-careful", _PAGE_PATH, "every row's careful figure after this round",
                      "## All 101 rows after this round (careful way)", r"^Run on (\d{4}-\d\d-\d\d) 01:54",
                      command="python benchmarks/published.py --ways careful --no-held-out --jobs 2 --json",
                      why="8 min 30 s of planning 101 rows"))
