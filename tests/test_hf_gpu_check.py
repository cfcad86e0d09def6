"""``benchmarks/gpu_check.py`` measures transformers' layers beside the native ones."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

pytest.importorskip("transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", os.path.join(ROOT, "benchmarks", "gpu_check.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_transformers_section_times_every_type_and_names_its_class():
    from planner.core.hf_config import load_model

    gc = _gpu_check()
    model = load_model("qwen3-30b-a3b")
    section = gc._transformers_section(model, 0.01, gc.DRY)
    types = section["layer_types"]
    assert set(types) == {"embedding", "gqa+moe", "head"}
    assert all(types[t]["f"] > 0 for t in types) and types["gqa+moe"]["a2a_f"] > 0  # side-stream link moved rows
    assert section["classes"] == {"embedding": "HfEmbedding", "gqa+moe": "Qwen3MoeDecoderLayer", "head": "HfHead"}
