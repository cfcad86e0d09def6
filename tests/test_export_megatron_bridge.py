"""``ppplan export --format megatron-bridge``: recipe overrides Megatron-Core's and Bridge's own code accept.

``import megatron.bridge`` needs transformer-engine (a CUDA build), so on CPU: the exported
YAML is merged over the model's recipe assignments (read from the installed Bridge source:
``recipes/qwen/qwen3_moe.py`` sets full / uniform / 1 recomputation, sequence length 4096,
alltoall; ``recipes/llama/llama3.py`` none and 8192) and the result must pass Megatron-Core's
``TransformerConfig.__post_init__`` (the base class of Bridge's ``GPTModelProvider``); the other
sections' field names are those of Bridge's dataclasses, read from its source. Where Bridge imports, its ``ConfigContainer``
from the real recipe takes the plan and checks itself.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from planner.api import plan as api_plan
from planner.core.hf_config import load_model
from planner.export import ExportError, export_plan
from planner.export.megatron_bridge import apply_plan_to_bridge, bridge_settings
from test_export_plans import case_plan

config_mod = pytest.importorskip("megatron.core.transformer.transformer_config",
                                 reason="megatron-core not installed (pip install -e '.[frameworks]')")

RECIPES = {"qwen3-30b-a3b": ("recipes/qwen/qwen3_moe.py", "qwen3_30b_a3b_pretrain_config"),
           "llama3-8b": ("recipes/llama/llama3.py", "llama3_8b_pretrain_config")}
"""ppplan model -> (Bridge source file, recipe function)."""


def _bridge_source(relpath: str) -> ast.Module:
    spec = importlib.util.find_spec("megatron.bridge")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron-bridge not installed (pip install --no-deps megatron-bridge, .ci/run)")
    return ast.parse((Path(list(spec.submodule_search_locations)[0]) / relpath).read_text())


def _class_fields(relpath: str, cls: str) -> set[str]:
    """Annotated fields and properties of a class in Bridge's source."""
    node = next(n for n in ast.walk(_bridge_source(relpath)) if isinstance(n, ast.ClassDef) and n.name == cls)
    return ({s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            | {s.name for s in node.body if isinstance(s, ast.FunctionDef)
               and any(isinstance(d, ast.Name) and d.id == "property" for d in s.decorator_list)})


@functools.lru_cache(maxsize=None)
def _recipe_model(model: str) -> dict:
    """``cfg.model.NAME = literal`` assignments of the model's recipe function, as Bridge's source writes them."""
    path, function = RECIPES[model]
    fn = next(n for n in ast.walk(_bridge_source(path)) if isinstance(n, ast.FunctionDef) and n.name == function)
    out = {}
    for node in ast.walk(fn):
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute)
                and target.value.attr == "model"):
            try:
                out[target.attr] = ast.literal_eval(node.value)
            except ValueError:  # torch dtypes and calls: not values the plan decides
                continue
    return out


PLAN_DECIDES = ("recompute_", "pipeline_model_parallel_", "virtual_pipeline_", "tensor_model_parallel_size",
                "expert_", "sequence_parallel", "moe_token_dispatcher_type", "moe_grouped_gemm", "seq_length", "mtp_",
                "num_layers", "bf16", "fp16", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute")
"""Model fields a pipeline plan decides (name prefixes), independent of what the export writes."""


def _recipe_plan_fields(model: str) -> dict:
    """The recipe's values of the fields a plan decides."""
    return {k: v for k, v in _recipe_model(model).items() if k.startswith(PLAN_DECIDES)}


def _merged_transformer_config(plan, model_name: str):
    """The recipe's plan-decided values with the exported YAML merged over them, as a ``TransformerConfig``."""
    import torch

    exported = yaml.safe_load(export_plan(plan, "megatron-bridge").files["megatron_bridge_overrides.yaml"])
    names = {f.name for f in dataclasses.fields(config_mod.TransformerConfig)}
    model = {k: v for k, v in {**_recipe_plan_fields(model_name), **exported["model"]}.items() if k in names}
    spec = load_model(model_name)
    shape = dict(hidden_size=spec.hidden, num_attention_heads=16, pipeline_dtype=torch.bfloat16)
    if spec.moe is not None:
        shape.update(num_moe_experts=spec.moe.num_experts, moe_router_topk=spec.moe.top_k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return config_mod.TransformerConfig(**shape, **model), exported


@functools.lru_cache(maxsize=None)
def _plan(model: str, vpp: int, recompute: str):
    return api_plan(model, target="megatron", vpp=vpp, recompute=recompute, work=1.0)


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("model, vpp", [("qwen3-30b-a3b", 1), ("qwen3-30b-a3b", 2), ("llama3-8b", 2)])
def test_overrides_over_the_recipe_pass_megatron_core(model, vpp, recompute):
    plan = _plan(model, vpp, recompute)
    config, exported = _merged_transformer_config(plan, model)
    # nothing of the recipe's full / uniform / 1 survives a plan that recomputes differently
    assert config.recompute_granularity == (None if recompute == "none" else recompute)
    assert config.recompute_method == ("uniform" if recompute == "full" else None)
    assert config.recompute_num_layers == (1 if recompute == "full" else None)
    assert config.pipeline_model_parallel_size == plan.pp
    assert config.virtual_pipeline_model_parallel_size == (vpp if vpp > 1 else None)
    assert exported["dataset"]["seq_length"] == exported["model"]["seq_length"] == plan.cluster.settings.seq_len
    assert exported["train"]["micro_batch_size"] == plan.microbatches["size"]
    assert exported["mixed_precision"] == "bf16_mixed" and config.bf16
    if load_model(model).moe is not None:
        assert config.moe_token_dispatcher_type == exported["model"]["moe_token_dispatcher_type"]
        fused = any(a.startswith("(") for acts in plan.schedule.values() for a in acts)
        assert config.overlap_moe_expert_parallel_comm == fused
        if fused:  # a CommOverlapConfig Bridge's override merge instantiates (recipes leave it None)
            section = exported["comm_overlap"]
            module, _, cls = section.pop("_target_").rpartition(".")
            assert module == "megatron.bridge.training.comm_overlap"
            assert set(section) <= _class_fields("training/comm_overlap.py", cls)
            assert section["overlap_moe_expert_parallel_comm"] is True
        else:
            assert "comm_overlap" not in exported


def test_every_plan_decided_field_of_the_recipe_is_written():
    """A field the recipe sets and the plan decides must be in the overrides, or the recipe's value leaks in."""
    written = bridge_settings(_plan("qwen3-30b-a3b", 2, "selective"))["model"]
    recipe = _recipe_plan_fields("qwen3-30b-a3b")
    assert {"recompute_granularity", "recompute_method", "recompute_num_layers", "recompute_modules",
            "moe_token_dispatcher_type", "sequence_parallel", "seq_length"} <= set(recipe)
    assert set(recipe) <= set(written)


def test_sections_are_bridges_fields():
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig

    s = bridge_settings(_plan("qwen3-30b-a3b", 2, "none"))
    names = lambda cls: {f.name for f in dataclasses.fields(cls)}  # noqa: E731
    assert set(s["model"]) <= names(config_mod.TransformerConfig) | _class_fields("models/gpt_provider.py",
                                                                                  "GPTModelProvider")
    assert set(s["train"]) <= _class_fields("training/config.py", "TrainingConfig")
    assert set(s["dataset"]) <= _class_fields("training/config.py", "GPTDatasetConfig")
    assert set(s["comm_overlap"]) <= _class_fields("training/comm_overlap.py", "CommOverlapConfig")
    assert set(s["optimizer"]) <= names(OptimizerConfig) and set(s["ddp"]) <= names(DistributedDataParallelConfig)
    assert "mixed_precision" in _class_fields("training/config.py", "ConfigContainer")
    registered = {n.name for n in ast.walk(_bridge_source("training/mixed_precision.py"))
                  if isinstance(n, ast.FunctionDef)
                  and any(getattr(d, "id", "") == "register" for d in n.decorator_list)}
    assert s["mixed_precision"] in registered


def test_apply_sets_every_section():
    plan = _plan("qwen3-30b-a3b", 2, "full")
    cfg = SimpleNamespace(model=SimpleNamespace(), dataset=SimpleNamespace(), train=SimpleNamespace(),
                          optimizer=SimpleNamespace(), ddp=SimpleNamespace(), comm_overlap=SimpleNamespace(),
                          mixed_precision=None)
    apply_plan_to_bridge(plan, cfg)
    for section, values in bridge_settings(plan).items():
        if isinstance(values, dict):
            assert {k: getattr(getattr(cfg, section), k) for k in values} == values
        else:
            assert getattr(cfg, section) == values


def test_refusal_names_the_bridge_format():
    with pytest.raises(ExportError, match=r"^export --format megatron-bridge: the plan places stages on ranks "
                                          r"\[0, 1, 1, 0\].*re-plan with --target megatron"):
        export_plan(case_plan("v"), "megatron-bridge")


def test_container_from_the_real_recipe_takes_the_plan():
    """Where Megatron-Bridge imports (transformer-engine present): its own ConfigContainer."""
    recipes = pytest.importorskip("megatron.bridge.recipes.qwen", reason="megatron.bridge needs transformer-engine")
    plan = _plan("qwen3-30b-a3b", 2, "selective")
    cfg = apply_plan_to_bridge(plan, getattr(recipes, RECIPES["qwen3-30b-a3b"][1])())
    assert cfg.model.recompute_num_layers is None and cfg.model.recompute_method is None
    assert cfg.dataset.seq_length == cfg.model.seq_length == plan.cluster.settings.seq_len
    assert cfg.model.pipeline_model_parallel_layout == bridge_settings(plan)["model"]["pipeline_model_parallel_layout"]
