"""Claims of docs/published-validation.md's section on context parallelism per ring step:
each torchtitan CP row's predicted optimizer step, peak and ratio to the published
tokens/s/GPU, re-derived by the benchmark the section documents (careful files, shipped
constants, no held-out fold)."""

from __future__ import annotations

from claim_outputs import published_row_claims

__all__ = ["CLAIMS"]

_SECTION = "## Context parallelism per chunk and reserved peaks"
_ROWS = ["torchtitan-2024-12-h100-hbm2e-llama3-8b-8gpu-fsdp4-cp2-seq64k-float8",
         "torchtitan-2024-12-h100-hbm2e-llama3-8b-8gpu-fsdp2-cp4-seq128k-float8",
         "torchtitan-2024-12-h100-hbm2e-llama3-8b-8gpu-fsdp1-cp8-seq256k-float8",
         "torchtitan-2024-12-h100-hbm2e-llama3-405b-512gpu-fsdp4-cp2-tp8-pp8-seq64k",
         "torchtitan-2024-12-h100-hbm2e-llama3-405b-512gpu-fsdp2-cp4-tp8-pp8-seq128k",
         "torchtitan-2024-12-h100-hbm2e-llama3-405b-512gpu-fsdp1-cp8-tp8-pp8-seq256k"]
"""torchtitan's December 2024 context-parallel rows (``cp_comm_type: torch_allgather``)."""
CLAIMS = published_row_claims(_ROWS, section=_SECTION, prefix="published-cp-ring", where="CP per ring step rows")
