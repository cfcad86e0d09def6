"""Claims of docs/published-validation.md's "Rows with CUDA-graph scopes and rowwise FP8": each
row's predicted optimizer step, peak and ratio to the published tokens/s/GPU, re-derived by the
benchmark the section documents (careful files, shipped constants, no held-out fold)."""

from __future__ import annotations

from claim_outputs import published_row_claims

__all__ = ["CLAIMS"]

_SECTION = "## Rows with CUDA-graph scopes and rowwise FP8"
_ROWS = ["torchtitan-2025-06-h100-hbm2e-llama3-70b-256gpu-fsdp32-tp8-float8-rowwise-vanillatp",
         "torchtitan-2025-06-h100-hbm2e-llama3-70b-256gpu-fsdp32-tp8-float8-rowwise-asynctp",
         "torchtitan-2025-06-h100-hbm2e-llama3-8b-64gpu-fsdp8-tp8-float8-rowwise-vanillatp",
         "torchtitan-2025-06-h100-hbm2e-llama3-8b-64gpu-fsdp8-tp8-float8-rowwise-asynctp",
         "mb-26.06-gb200-qwen3-30b-a3b-mxfp8-8gpu",
         "modelzoo-20260309-h100-qwen3-235b-a22b-tp2pp8vpp4ep32-overlap-cudagraph"]
"""The four torchao rowwise rows and the two CUDA-graph rows the issue names."""
CLAIMS = published_row_claims(_ROWS, section=_SECTION, prefix="published-graphfp8", where="graph/rowwise rows",
                              command=f"python benchmarks/published.py --rows {','.join(_ROWS)} --ways careful "
                                      "--no-held-out --jobs 1 --json")
