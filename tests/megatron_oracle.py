"""Megatron-Core's own reading of a ``--pipeline-model-parallel-layout`` string: the test oracle
for every layout ppplan writes or reads (megatron/core/transformer/pipeline_parallel_layer_layout.py,
installed with the ``test`` extra)."""

from __future__ import annotations

import contextlib
import io
import warnings

_LETTERS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}


def megatron_stages(layout: str, pp: int, letters: str) -> list[str]:
    """Megatron-Core's parse and check of ``layout`` for a model whose layers are ``letters``
    (E, t, m, L): each stage's letters in stage order (stage i = chunk i // pp of rank i % pp);
    raises whatever Megatron raises."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

        parsed = PipelineParallelLayerLayout(layout, pp)
        mtp = letters.count("m")
        parsed.validate_layer_layout(num_layers=letters.count("t"), mtp_num_layers=mtp or None)
    vpp = parsed.virtual_pipeline_model_parallel_size
    return ["".join(_LETTERS[t.name] for t in parsed.layout[s % pp][s // pp]) for s in range(pp * vpp)]
