"""The analytical cost model's parts, one concept per module: GEMM efficiency (``gemm``),
communication (``comm``), data-parallel traffic and the optimizer step (``optimizer``),
the constants fitted on published runs (``fitted``) and the per-microbatch context
that ties them to one cluster (``context``). ``profiler.analytical`` builds cost tables
from them."""
