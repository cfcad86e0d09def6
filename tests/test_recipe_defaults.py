"""Framework recipe defaults in cluster files: what ``recipe`` fills, what it never overrides,
bad values, and the cluster schema documenting every field."""

from __future__ import annotations

import dataclasses
import json

import pytest

from planner.api import plan, resolve_cluster
from planner.core.cluster import KERNEL_CHOICES, ClusterSpec, ParallelSpec, TrainingSpec, cluster_from_dict
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.network import DISPATCHERS, NetworkSpec
from planner.core.paths import SCHEMAS_DIR
from planner.core.recipes import RECIPE_CHOICES, RECIPE_FIELDS, RECIPES, apply_recipe

PLAIN = {"gpu": "h100", "num_gpus": 16, "parallel": {"pp": 1, "tp": 1, "ep": 16, "dp": 16},
         "training": {"global_batch": 1024, "seq_len": 4096}}


def _resolved(model: str, **changes) -> ClusterSpec:
    data = json.loads(json.dumps(PLAIN))
    for key, value in changes.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return cluster_from_dict(data).check_against(load_model(model))


def test_megatron_recipe_fills_the_bridge_preset_for_qwen3_30b():
    c = _resolved("qwen3-30b-a3b", recipe="megatron")
    assert c.network.dispatcher == "hybridep" and c.training.cuda_graphs  # QWEN3_30B_A3B_..._H100_BF16_V1
    assert not c.training.fsdp and c.training.kernels == "fused"


def test_megatron_recipe_for_deepseek_v3_recomputes_selectively_over_hybridep():
    c = cluster_from_dict({**PLAIN, "num_gpus": 64, "parallel": {"pp": 1, "ep": 64, "dp": 64},
                           "recipe": "megatron"}).check_against(load_model("deepseek-v3"))
    assert c.training.recompute == "selective" and c.network.dispatcher == "hybridep"


def test_torchtitan_recipe_is_fsdp_eager_per_op_for_llama3_8b():
    data = {**PLAIN, "num_gpus": 8, "parallel": {"pp": 1, "dp": 8}, "recipe": "torchtitan"}
    c = cluster_from_dict(data).check_against(load_model("llama3-8b"))
    assert c.training.fsdp and c.training.kernels == "eager" and c.training.recompute == "op"


def test_without_a_recipe_the_schema_defaults_stay():
    c = _resolved("qwen3-30b-a3b")
    assert c.network == NetworkSpec() and c.training.cuda_graphs is False and c.training.recompute == "auto"


def test_a_field_the_file_states_wins_over_the_recipe():
    c = _resolved("qwen3-30b-a3b", recipe="megatron", network={"dispatcher": "alltoall"},
                  training={"cuda_graphs": False})
    assert c.network.dispatcher == "alltoall" and c.training.cuda_graphs is False
    assert {"network.dispatcher", "training.cuda_graphs"} <= c.stated


def test_a_cli_override_wins_over_the_recipe(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({**PLAIN, "num_gpus": 64, "parallel": {"pp": 1, "ep": 64, "dp": 64},
                                "recipe": "megatron"}))
    spec = resolve_cluster(load_model("deepseek-v3"), path, recompute="none")
    assert spec.training.recompute == "none" and spec.network.dispatcher == "hybridep"


def test_target_names_the_recipe_unless_the_file_does():
    model = load_model("qwen3-30b-a3b")
    plain = cluster_from_dict(PLAIN)
    assert plain.for_target("megatron").check_against(model).network.dispatcher == "hybridep"
    assert plain.for_target("torch") == plain and plain.for_target("deepspeed") == plain
    own = cluster_from_dict({**PLAIN, "recipe": "none"})
    assert own.for_target("megatron").check_against(model).network.dispatcher == "alltoall"


def test_applying_a_recipe_twice_changes_nothing():
    once = _resolved("qwen3-30b-a3b", recipe="megatron")
    assert apply_recipe(once, "qwen3-30b-a3b", "megatron") == once


def test_every_recipe_sets_only_known_fields_to_valid_values():
    for (target, _), recipe in RECIPES.items():
        assert target in RECIPE_CHOICES and recipe.source
        assert set(recipe.values) <= set(RECIPE_FIELDS)
        assert recipe.values.get("network.dispatcher", "alltoall") in DISPATCHERS
        assert recipe.values.get("training.kernels", "fused") in KERNEL_CHOICES


def test_plan_records_the_recipe_values(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"gpu": "h100", "num_gpus": 8, "parallel": {"pp": 2, "dp": 4},
                                "training": {"global_batch": 16, "seq_len": 2048}, "recipe": "torchtitan"}))
    training = plan("llama3-8b", cluster=str(path), work=1).cluster.settings
    assert training["fsdp"] is True and training["kernels"] == "eager" and training["recompute"] == "op"


@pytest.mark.parametrize("value", ["nemo", 3, ["megatron"]])
def test_unknown_recipe_is_one_line_naming_the_field_and_the_choices(value):
    with pytest.raises(InputError, match=r"recipe.*use one of none, megatron, torchtitan") as exc:
        cluster_from_dict({**PLAIN, "recipe": value})
    assert exc.value.field == "cluster.recipe" and "\n" not in str(exc.value)


def test_schema_documents_every_cluster_field():
    schema = json.loads((SCHEMAS_DIR / "cluster.schema.json").read_text())["properties"]
    for section, cls in (("parallel", ParallelSpec), ("training", TrainingSpec), ("network", NetworkSpec)):
        props = schema[section]["properties"]
        assert set(props) == {f.name for f in dataclasses.fields(cls)}, section
        assert all(p["description"] for p in props.values()), section
    assert schema["recipe"]["enum"] == list(RECIPE_CHOICES)
    assert schema["network"]["properties"]["dispatcher"]["enum"] == list(DISPATCHERS)
    top = {f.name for f in dataclasses.fields(ClusterSpec)} - {"stated"}
    assert top <= set(schema)
