"""Claims of docs/published-validation.md's section on context parallelism per ring step:
each torchtitan CP row's predicted optimizer step, peak and ratio to the published
tokens/s/GPU, re-derived by the benchmark the section documents (careful files, shipped
constants, no held-out fold)."""

from __future__ import annotations

import re

from claim_kit import Claim, Page

__all__ = ["CLAIMS"]

_PAGE = "docs/published-validation.md"
_SECTION = "## Context parallelism per chunk and reserved peaks"
_ROWS = ["torchtitan-2024-12-h100-hbm2e-llama3-8b-8gpu-fsdp4-cp2-seq64k-float8",
         "torchtitan-2024-12-h100-hbm2e-llama3-8b-8gpu-fsdp2-cp4-seq128k-float8",
         "torchtitan-2024-12-h100-hbm2e-llama3-8b-8gpu-fsdp1-cp8-seq256k-float8",
         "torchtitan-2024-12-h100-hbm2e-llama3-405b-512gpu-fsdp4-cp2-tp8-pp8-seq64k",
         "torchtitan-2024-12-h100-hbm2e-llama3-405b-512gpu-fsdp2-cp4-tp8-pp8-seq128k",
         "torchtitan-2024-12-h100-hbm2e-llama3-405b-512gpu-fsdp1-cp8-tp8-pp8-seq256k"]
"""torchtitan's December 2024 context-parallel rows (``cp_comm_type: torch_allgather``)."""
_COMMAND = f"python benchmarks/published.py --rows {','.join(_ROWS)} --ways careful --no-held-out --json"


def _cells(run, row_id: str) -> tuple[str, str, str]:
    """Predicted optimizer step, peak and predicted / published ratio of ``row_id``."""
    got = next(r for r in run.json()["rows"] if r["id"] == row_id)["careful"]
    return got["optimizer_step"], got["peak_gib"], f"{got['ratio']:.2f}"


def _row(row_id: str) -> str:
    """The row's last three cells (after cp, the earlier ratio and the published step)."""
    return rf"^\|\s*{re.escape(row_id)}\s*\|(?:[^|\n]*\|){{3}}([^|\n]*)\|([^|\n]*)\|([^|\n]*)\|$"


CLAIMS = [Claim(id=f"published-cp-ring-{i:02d}", where=f"CP per ring step rows: {row_id}", command=_COMMAND,
                figure=Page(path=_PAGE, section=_SECTION, pattern=_row(row_id)),
                measured=lambda run, r=row_id: _cells(run, r))
          for i, row_id in enumerate(_ROWS)]
