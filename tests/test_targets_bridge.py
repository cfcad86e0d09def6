"""A plan applied to a Megatron-Bridge recipe's ``ConfigContainer``.

``import megatron.bridge`` does not work on this CPU machine (megatron-bridge 0.3.1 imports
transformers and needs transformer-engine, mamba-ssm and nvidia-resiliency-ext, CUDA
builds), so: the model fields are checked by Megatron-Core's own ``TransformerConfig``
(the base class of Bridge's ``GPTModelProvider``), and the train / optimizer / comm-overlap
field names against the dataclasses in the installed Bridge source (installed with
--no-deps by .ci/run), read without importing it.
"""

from __future__ import annotations

import ast
import importlib.util
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from planner.api import plan as api_plan
from planner.core.hf_config import load_model
from planner.export.megatron_bridge import apply_plan_to_bridge, bridge_settings

config_mod = pytest.importorskip("megatron.core.transformer.transformer_config",
                                 reason="megatron-core not installed (pip install -e '.[frameworks]')")


def _bridge_fields(relpath: str, cls: str) -> set[str]:
    spec = importlib.util.find_spec("megatron.bridge")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron-bridge not installed (pip install --no-deps megatron-bridge)")
    tree = ast.parse((Path(list(spec.submodule_search_locations)[0]) / relpath).read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}


@pytest.fixture(scope="module")
def overlap_plan():
    return api_plan("qwen3-30b-a3b", target="megatron", vpp=2, work=2.0)


def test_model_fields_pass_megatron_cores_checks(overlap_plan):
    import torch

    s = bridge_settings(overlap_plan)
    spec = load_model("qwen3-30b-a3b")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = dict(s["model"])
        model.pop("seq_length")  # a GPTModelProvider field, not a TransformerConfig one
        config_mod.TransformerConfig(hidden_size=spec.hidden, num_attention_heads=16, pipeline_dtype=torch.bfloat16,
                                     num_moe_experts=spec.moe.num_experts, moe_router_topk=spec.moe.top_k, **model)
    assert s["model"]["virtual_pipeline_model_parallel_size"] == 2
    assert s["train"]["global_batch_size"] == overlap_plan.num_microbatches * s["train"]["micro_batch_size"] * \
        overlap_plan.parallel["dp"]


def test_train_optimizer_and_overlap_fields_are_bridges(overlap_plan):
    s = bridge_settings(overlap_plan)
    assert set(s["train"]) <= _bridge_fields("training/config.py", "TrainingConfig")
    assert set(s["comm_overlap"]) <= _bridge_fields("training/comm_overlap.py", "CommOverlapConfig")
    assert "seq_length" in _bridge_fields("models/gpt_provider.py", "GPTModelProvider")


def test_apply_sets_every_section(overlap_plan):
    cfg = SimpleNamespace(model=SimpleNamespace(), dataset=SimpleNamespace(), train=SimpleNamespace(),
                          optimizer=SimpleNamespace(), ddp=SimpleNamespace(), comm_overlap=SimpleNamespace())
    apply_plan_to_bridge(overlap_plan, cfg)
    s = bridge_settings(overlap_plan)
    assert cfg.mixed_precision == s.pop("mixed_precision")
    for section, values in s.items():
        assert {k: getattr(getattr(cfg, section), k) for k in values} == values


def test_bridge_example_prints_the_plans_settings():
    import json
    import subprocess
    import sys

    example = Path(__file__).resolve().parent.parent / "examples" / "megatron_bridge_recipe.py"
    run = subprocess.run([sys.executable, str(example), "--model", "llama3-8b", "--work", "2", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    settings = json.loads(run.stdout)
    assert settings["model"]["pipeline_model_parallel_layout"].startswith("E")
    assert "moe_grouped_gemm" not in settings["model"]  # dense model
    assert settings["comm_overlap"]["overlap_moe_expert_parallel_comm"] is False
