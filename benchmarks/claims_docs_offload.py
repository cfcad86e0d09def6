"""Claims of docs/published-validation.md's rows that offloaded activations: each row's
predicted optimizer step, peak and ratio to the published tokens/s/GPU with the run's
offloading in its cluster file (``training.offload``), re-derived by the benchmark the page
documents (careful files, shipped constants, no held-out fold)."""

from __future__ import annotations

from claim_outputs import published_row_claims

__all__ = ["CLAIMS"]

_SECTION = "## Rows that offloaded activations"
_ROWS = ["mb-25.11-gb200-llama3-70b-fp8cs-fsdp-64gpu", "modelzoo-20260310-gb200-qwen3-235b-a22b-mxfp8-tp1pp4vpp6ep64"]
"""The two published rows whose runs offloaded activations (their sources name the flags)."""
CLAIMS = published_row_claims(_ROWS, section=_SECTION, prefix="published-offload", where="offloaded-activation rows")
