"""Claims of docs/published-validation.md's rows that offloaded activations: each row's
predicted optimizer step, peak and ratio to the published tokens/s/GPU with the run's
offloading in its cluster file (``training.offload``), re-derived by the benchmark the page
documents (careful files, shipped constants, no held-out fold)."""

from __future__ import annotations

import re

from claim_kit import Claim, Page

__all__ = ["CLAIMS"]

_PAGE = "docs/published-validation.md"
_SECTION = "## Rows that offloaded activations"
_ROWS = ["mb-25.11-gb200-llama3-70b-fp8cs-fsdp-64gpu", "modelzoo-20260310-gb200-qwen3-235b-a22b-mxfp8-tp1pp4vpp6ep64"]
"""The two published rows whose runs offloaded activations (their sources name the flags)."""
_COMMAND = f"python benchmarks/published.py --rows {','.join(_ROWS)} --ways careful --no-held-out --json"


def _cells(run, row_id: str) -> tuple[str, str, str]:
    """Predicted optimizer step, peak and predicted / published ratio of ``row_id``."""
    got = next(r for r in run.json()["rows"] if r["id"] == row_id)["careful"]
    return got["optimizer_step"], got["peak_gib"], f"{got['ratio']:.2f}"


def _row(row_id: str) -> str:
    """The row's last three cells (after its offloading, the earlier figure and the published step)."""
    return rf"^\|\s*{re.escape(row_id)}\s*\|(?:[^|\n]*\|){{3}}([^|\n]*)\|([^|\n]*)\|([^|\n]*)\|$"


CLAIMS = [Claim(id=f"published-offload-{i:02d}", where=f"offloaded-activation rows: {row_id}", command=_COMMAND,
                figure=Page(path=_PAGE, section=_SECTION, pattern=_row(row_id)),
                measured=lambda run, r=row_id: _cells(run, r))
          for i, row_id in enumerate(_ROWS)]
