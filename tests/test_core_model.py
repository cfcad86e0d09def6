"""Model specs of every shipped model: layer sequence, roles, type keys, parameter totals."""

from __future__ import annotations

import json

import pytest

from planner.core.errors import InputError
from planner.core.hf_config import load_model, model_from_config
from planner.core.layer_math import layer_params, model_flops_per_token
from planner.core.model import FFNS, MIXERS, ROLES
from planner.core.paths import MODELS_DIR, SHIPPED_MODELS

# id -> (decoder layers, MTP layers, distinct type keys in order of first appearance)
LAYOUT = {
    "llama3-8b": (32, 0, ["embedding", "gqa+dense", "head"]),
    "qwen3-30b-a3b": (48, 0, ["embedding", "gqa+moe", "head"]),
    "qwen3-235b-a22b": (94, 0, ["embedding", "gqa+moe", "head"]),
    "qwen3-next-80b-a3b": (48, 1, ["embedding", "linear+moe", "gqa+moe", "mtp:gqa+moe", "head"]),
    "deepseek-v3": (61, 1, ["embedding", "mla+dense", "mla+moe", "mtp:mla+moe", "head"]),
}

# Published sizes (model cards / technical reports), in billions: total parameters
# without MTP, and activated parameters per token counting the embedding. Bounds are
# loose ("roughly"): the cards round, and count norms/biases slightly differently.
SIZES = {
    "llama3-8b": ((7.9, 8.1), None),             # Llama 3 8B: 8.0B dense
    "qwen3-30b-a3b": ((30.0, 31.0), (3.1, 3.5)),  # 30.5B total, 3.3B activated
    "qwen3-235b-a22b": ((232, 238), (21, 23)),    # 235B total, 22B activated
    "qwen3-next-80b-a3b": ((78, 82), (3.0, 4.0)),  # 80B total, "3B" activated
    "deepseek-v3": ((665, 677), (36, 39)),        # 671B main + 14B MTP, 37B activated
}


@pytest.fixture(scope="module", params=SHIPPED_MODELS)
def spec(request):
    return load_model(request.param)


def test_every_shipped_model_has_a_layout_entry():
    assert set(LAYOUT) == set(SHIPPED_MODELS)


def test_layer_sequence(spec):
    decoders, mtp, types = LAYOUT[spec.name]
    roles = [layer.role for layer in spec.layers]
    assert roles == ["embedding"] + ["decoder"] * decoders + ["mtp"] * mtp + ["head"]
    assert spec.num_layers == decoders + mtp + 2
    assert spec.num_decoder_layers == decoders
    assert spec.type_keys() == types
    assert [layer.index for layer in spec.layers] == list(range(spec.num_layers))
    for layer in spec.layers:
        assert layer.role in ROLES
        if layer.role in ("decoder", "mtp"):
            assert layer.mixer in MIXERS and layer.ffn in FFNS
        else:
            assert layer.mixer is None and layer.ffn is None


def test_qwen3_next_full_attention_every_fourth_layer():
    spec = load_model("qwen3-next-80b-a3b")
    decoders = [layer for layer in spec.layers if layer.role == "decoder"]
    full = [k for k, layer in enumerate(decoders) if layer.mixer == "gqa"]
    assert full == list(range(3, 48, 4))
    assert all(layer.mixer == "linear" for k, layer in enumerate(decoders) if k not in full)
    assert all(layer.ffn == "moe" for layer in decoders)
    assert spec.moe.shared_intermediate == 512 and spec.moe.shared_gate
    assert spec.layers[-2].type_key == "mtp:gqa+moe"


def test_deepseek_v3_first_three_dense_then_moe_and_mtp():
    spec = load_model("deepseek-v3")
    decoders = [layer for layer in spec.layers if layer.role == "decoder"]
    assert [layer.ffn for layer in decoders[:3]] == ["dense"] * 3
    assert all(layer.ffn == "moe" for layer in decoders[3:])
    assert all(layer.mixer == "mla" for layer in decoders)
    assert spec.layers[-2].role == "mtp" and spec.layers[-2].type_key == "mtp:mla+moe"
    assert spec.moe.num_experts == 256 and spec.moe.top_k == 8
    assert spec.moe.shared_intermediate == spec.moe.expert_intermediate  # one shared expert


def _billions(spec, attr: str, *, roles: tuple[str, ...]) -> float:
    return sum(getattr(layer_params(layer, spec), attr) for layer in spec.layers
               if layer.role in roles) / 1e9


def test_parameter_totals_match_published_sizes(spec):
    (lo, hi), activated = SIZES[spec.name]
    total = _billions(spec, "total", roles=("embedding", "decoder", "head"))
    assert lo <= total <= hi, f"{spec.name}: {total:.2f}B total"
    if activated is not None:
        embedding = layer_params(spec.layers[0], spec).total / 1e9
        active = _billions(spec, "activated", roles=("decoder", "head")) + embedding
        assert activated[0] <= active <= activated[1], f"{spec.name}: {active:.2f}B activated"
    else:
        assert not spec.is_moe


def test_deepseek_v3_mtp_module_size():
    spec = load_model("deepseek-v3")
    mtp = _billions(spec, "total", roles=("mtp",))
    shared = (layer_params(spec.layers[0], spec).total + layer_params(spec.layers[-1], spec).total) / 1e9
    assert 13.0 <= mtp + shared <= 15.0  # the report's 14B MTP module shares embedding and head


def test_training_flops_per_token_near_six_n(spec):
    # PaLM: ~6 x activated parameters per token plus attention; never below 6N.
    active = _billions(spec, "activated", roles=("decoder", "mtp", "head")) * 1e9
    flops = model_flops_per_token(spec, 4096)
    assert 6 * active <= flops <= 6 * active * 2.5


def test_load_by_path_equals_shipped_id(tmp_path):
    cfg = tmp_path / "mymodel" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text((MODELS_DIR / "llama3-8b.json").read_text())
    by_path = load_model(str(cfg.parent))
    assert by_path.name == "mymodel"
    assert by_path.layers == load_model("llama3-8b").layers


@pytest.mark.parametrize("change, field", [
    ({"model_type": "gpt2"}, "config.model_type"),
    ({"hidden_size": -4}, "config.hidden_size"),
    ({"num_hidden_layers": 0}, "config.num_hidden_layers"),
    ({"num_experts_per_tok": 1000}, "config.num_experts_per_tok"),
    ({"vocab_size": "many"}, "config.vocab_size"),
])
def test_bad_config_fields_name_the_field(change, field):
    cfg = json.loads((MODELS_DIR / "qwen3-30b-a3b.json").read_text())
    cfg.update(change)
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        model_from_config(cfg, name="bad")


def test_missing_config_field_is_named():
    cfg = json.loads((MODELS_DIR / "deepseek-v3.json").read_text())
    del cfg["kv_lora_rank"]
    with pytest.raises(InputError, match=r"config\.kv_lora_rank: missing"):
        model_from_config(cfg, name="bad")


def test_unknown_model_id_lists_shipped_ids():
    with pytest.raises(InputError, match="unknown model id.*llama3-8b"):
        load_model("llama-9000")


def test_config_not_json(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_model(str(bad))
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match="expected a JSON object"):
        load_model(str(bad))
