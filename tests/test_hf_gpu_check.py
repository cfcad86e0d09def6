"""``benchmarks/gpu_check.py`` measures transformers' layers beside the native ones."""

from __future__ import annotations

import pytest

from benchmark_modules import load_benchmark
pytest.importorskip("transformers")

def _gpu_check():
    return load_benchmark("gpu_check")


def test_transformers_section_times_every_type_and_names_its_class():
    from planner.core.hf_config import load_model

    gc = _gpu_check()
    model = load_model("qwen3-30b-a3b")
    section = gc._transformers_section(model, 0.01, gc.DRY)
    types = section["layer_types"]
    assert set(types) == {"embedding", "gqa+moe", "head"}
    assert all(types[t]["f"] > 0 for t in types) and types["gqa+moe"]["a2a_f"] > 0  # side-stream link moved rows
    assert section["classes"] == {"embedding": "HfEmbedding", "gqa+moe": "Qwen3MoeDecoderLayer", "head": "HfHead"}
