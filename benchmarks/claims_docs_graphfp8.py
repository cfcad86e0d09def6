"""Claims of docs/published-validation.md's "Rows with CUDA-graph scopes and rowwise FP8": each
row's predicted optimizer step, peak and ratio to the published tokens/s/GPU, re-derived by the
benchmark the section documents (careful files, shipped constants, no held-out fold)."""

from __future__ import annotations

import re

from claim_kit import Claim, Page

__all__ = ["CLAIMS"]

_PAGE = "docs/published-validation.md"
_SECTION = "## Rows with CUDA-graph scopes and rowwise FP8"
_ROWS = ["torchtitan-2025-06-h100-hbm2e-llama3-70b-256gpu-fsdp32-tp8-float8-rowwise-vanillatp",
         "torchtitan-2025-06-h100-hbm2e-llama3-70b-256gpu-fsdp32-tp8-float8-rowwise-asynctp",
         "torchtitan-2025-06-h100-hbm2e-llama3-8b-64gpu-fsdp8-tp8-float8-rowwise-vanillatp",
         "torchtitan-2025-06-h100-hbm2e-llama3-8b-64gpu-fsdp8-tp8-float8-rowwise-asynctp",
         "mb-26.06-gb200-qwen3-30b-a3b-mxfp8-8gpu",
         "modelzoo-20260309-h100-qwen3-235b-a22b-tp2pp8vpp4ep32-overlap-cudagraph"]
"""The four torchao rowwise rows and the two CUDA-graph rows the issue names."""
_COMMAND = f"python benchmarks/published.py --rows {','.join(_ROWS)} --ways careful --no-held-out --jobs 1 --json"


def _cells(run, row_id: str) -> tuple[str, str, str]:
    """Predicted optimizer step, peak and predicted / published ratio of ``row_id``."""
    got = next(r for r in run.json()["rows"] if r["id"] == row_id)["careful"]
    return got["optimizer_step"], got["peak_gib"], f"{got['ratio']:.2f}"


def _row(row_id: str) -> str:
    """The row's last three cells (after its setting, the earlier ratio and the published step)."""
    return rf"^\|\s*{re.escape(row_id)}\s*\|(?:[^|\n]*\|){{3}}([^|\n]*)\|([^|\n]*)\|([^|\n]*)\|$"


CLAIMS = [Claim(id=f"published-graphfp8-{i:02d}", where=f"graph/rowwise rows: {row_id}", command=_COMMAND,
                figure=Page(path=_PAGE, section=_SECTION, pattern=_row(row_id)),
                measured=lambda run, r=row_id: _cells(run, r))
          for i, row_id in enumerate(_ROWS)]
