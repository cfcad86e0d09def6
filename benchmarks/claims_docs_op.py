"""Claims of torchtitan's per-op checkpointing (``recompute: op``): what a Llama 3.1 8B layer
keeps per token under each mode (docs/costs.md), from the analytical cost table, and the
torchtitan rows planned with it (docs/published-validation.md), from the published benchmark."""

from __future__ import annotations

from claim_kit import Claim, Page
from claim_outputs import published_row_claims

__all__ = ["CLAIMS", "OP_ROWS"]

_KEPT = ("python -c \"from planner.core.hf_config import load_model as m; "
         "from planner.core.cluster import load_cluster as c, default_cluster_path as d; "
         "from profiler.analytical import analytical_costs as a; s=m('llama3-8b'); k=c(d('llama3-8b')); "
         "t=k.training.micro_batch_size*k.training.seq_len; "
         "print(*[int(next(l for l in a(s,k.with_recompute(x)).layers if l.role=='decoder').act_bytes/2/t) "
         "for x in ('op','selective','none')])\"")
"""Each mode's kept BF16 elements per token of one Llama 3.1 8B decoder layer."""

CLAIMS = [Claim(
    id="costs-op-kept", where="costs.md: per-op checkpointing, Llama 3.1 8B elements kept per token and layer",
    command=_KEPT,
    figure=Page(path="docs/costs.md", section="### torchtitan's per-op checkpointing (`op`)",
                pattern=r"is ([\d,]+) elements per token and layer against selective's ([\d,]+) and none's ([\d,]+)"),
    measured=lambda run: tuple(f"{int(x):,}" for x in run.stdout.split()))]

OP_ROWS = ['torchtitan-8gpu-eager-llama3-8b', 'torchtitan-128gpu-eager-llama3-8b',
           'torchtitan-2024-12-h100-hbm2e-llama3-8b-8gpu-fsdp-compile',
           'torchtitan-2024-12-h100-hbm2e-llama3-8b-8gpu-fsdp-compile-float8',
           'torchtitan-2024-12-h100-hbm2e-llama3-8b-128gpu-fsdp-compile',
           'torchtitan-2024-12-h100-hbm2e-llama3-8b-128gpu-fsdp-compile-float8',
           'torchtitan-2025-06-h100-hbm2e-llama3-8b-64gpu-fsdp8-tp8-bf16-vanillatp',
           'torchtitan-2025-06-h100-hbm2e-llama3-8b-64gpu-fsdp8-tp8-bf16-asynctp',
           'torchtitan-2025-06-h100-hbm2e-llama3-8b-64gpu-fsdp8-tp8-float8-tensorwise-vanillatp',
           'torchtitan-2025-06-h100-hbm2e-llama3-8b-64gpu-fsdp8-tp8-float8-tensorwise-asynctp',
           'torchtitan-2025-06-h100-hbm2e-llama3-8b-64gpu-fsdp8-tp8-float8-rowwise-vanillatp',
           'torchtitan-2025-06-h100-hbm2e-llama3-8b-64gpu-fsdp8-tp8-float8-rowwise-asynctp',
           'torchtitan-2025-06-h200-llama3-8b-32gpu-fsdp-compile-float8',
           'torchtitan-2025-06-h200-llama3-8b-64gpu-fsdp-compile-float8']
"""The torchtitan rows whose files say ``recompute: op`` (torchtitan's per-op checkpointing)."""

CLAIMS += published_row_claims(OP_ROWS, section="## torchtitan's per-op checkpointing", prefix="published-op",
                               where="torchtitan per-op rows", jobs=2)
