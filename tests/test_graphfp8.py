"""CUDA-graph scopes (``training.cuda_graph_scope``, ``planner.core.cuda_graphs``) and torchao's
rowwise FP8 recipe (``fp8_recipe: torchao_rowwise``, ``profiler.cost_model.gemm``).

The Megatron export's ``--cuda-graph-impl`` / ``--cuda-graph-scope`` are checked by
megatron-core 0.16.1's own ``TransformerConfig.__post_init__``, and the load-time checks
agree with it on the scopes it refuses.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import yaml

from planner.core.cluster import cluster_from_dict
from planner.core.cuda_graphs import moe_host_graphed
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from profiler.analytical import analytical_costs
from profiler.cost_model.fitted import FittedConstants
from profiler.cost_model.gemm import ROWWISE_SAVING_SHARE

BASE = {"gpu": "h100", "num_gpus": 16, "gpus_per_node": 8,
        "parallel": {"pp": 1, "tp": 1, "ep": 8, "dp": 16},
        "training": {"global_batch": 256, "seq_len": 4096, "micro_batch_size": 1, "recompute": "none"}}
CAL = FittedConstants(gemm_eff_max=0.6, gemm_dim_half=500.0, grouped_gemm_eff=1.0, moe_layer_overhead_s=1e-3)


def _cluster(**training):
    data = copy.deepcopy(BASE)
    data["training"].update(training)
    return cluster_from_dict(data)


def _moe_layer(training: dict):
    spec = load_model("qwen3-30b-a3b")
    table = analytical_costs(spec, _cluster(**training), constants=CAL, size_curve_sizes=())
    return next(lc for lc, layer in zip(table.layers, spec.layers) if layer.is_moe)


# -- torchao rowwise FP8 ------------------------------------------------------------------------

def test_rowwise_share_is_torchaos_measured_one():
    assert ROWWISE_SAVING_SHARE == pytest.approx(0.456, abs=1e-3)


def test_rowwise_gemms_keep_the_measured_share_of_tensorwise_saving():
    spec = load_model("llama3-8b")
    w = {name: analytical_costs(spec, _cluster(**kw), constants=CAL, size_curve_sizes=()).layers[1].w
         for name, kw in {"bf16": {}, "tw": {"precision": "fp8", "fp8_recipe": "torchao"},
                          "row": {"precision": "fp8", "fp8_recipe": "torchao_rowwise"}}.items()}
    assert w["tw"] < w["row"] < w["bf16"]
    assert w["row"] == pytest.approx(w["bf16"] - ROWWISE_SAVING_SHARE * (w["bf16"] - w["tw"]), rel=1e-9)


def test_rowwise_keeps_bf16_inputs_like_tensorwise_torchao():
    spec = load_model("llama3-8b")
    tw = analytical_costs(spec, _cluster(precision="fp8", fp8_recipe="torchao"), size_curve_sizes=())
    row = analytical_costs(spec, _cluster(precision="fp8", fp8_recipe="torchao_rowwise"), size_curve_sizes=())
    assert row.layers[1].act_bytes == tw.layers[1].act_bytes


def test_the_four_rowwise_rows_state_the_rowwise_recipe():
    from pathlib import Path

    clusters = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "clusters"
    rows = sorted(clusters.glob("torchtitan-2025-06-*-float8-rowwise-*.yaml"))
    assert len(rows) == 4
    for path in rows:
        assert yaml.safe_load(path.read_text())["training"]["fp8_recipe"] == "torchao_rowwise", path.name


# -- CUDA-graph scopes: cost ----------------------------------------------------------------------

def test_the_boolean_means_router_and_preprocess_graphs():
    assert _moe_layer({"cuda_graphs": True}).f == pytest.approx(
        _moe_layer({"cuda_graph_scope": ["moe_router", "moe_preprocess"]}).f, rel=1e-12)


@pytest.mark.parametrize(("scope", "charged"), [
    (["moe_router"], True),  # the preprocessing's token-count sync stays on the host
    (["attn"], True), ("none", True),
    (["attn", "moe_router", "moe_preprocess"], False), (["full_iteration"], False), ([], False),
])
def test_scope_decides_whether_the_moe_host_time_is_charged(scope, charged):
    plain = _moe_layer({})
    got = _moe_layer({"cuda_graph_scope": scope})
    assert (plain.f - got.f) == pytest.approx(0.0 if charged else 1e-3, abs=1e-12)
    assert (plain.i - got.i) == pytest.approx(0.0 if charged else 1e-3, abs=1e-12)


def test_full_recompute_runs_ungraphed_as_megatron_demands():
    """Megatron graphs full recomputation only whole-iteration: under the boolean the full mode
    pays the MoE host time, under full_iteration it does not."""
    plain = _moe_layer({"recompute": "full"})
    assert _moe_layer({"recompute": "full", "cuda_graphs": True}).f == pytest.approx(plain.f, rel=1e-12)
    assert plain.f - _moe_layer({"recompute": "full", "cuda_graph_scope": ["full_iteration"]}).f == \
        pytest.approx(1e-3, abs=1e-12)


def test_scope_strings_and_lists_read_alike():
    assert _cluster(cuda_graph_scope="attn moe_router,moe_preprocess").training.cuda_graph_scope == \
        _cluster(cuda_graph_scope=["attn", "moe_router", "moe_preprocess"]).training.cuda_graph_scope
    assert moe_host_graphed(_cluster(cuda_graph_scope=[]).training)  # Megatron: [] is the whole layer


# -- CUDA-graph scopes: bad input -------------------------------------------------------------------

@pytest.mark.parametrize(("training", "pattern"), [
    ({"cuda_graph_scope": ["router"]}, r"training.cuda_graph_scope: unknown scope 'router'"),
    ({"cuda_graph_scope": ["moe_preprocess"]}, r"moe_preprocess needs moe_router"),
    ({"cuda_graph_scope": ["moe", "moe_router"]}, r"moe and moe_router exclude each other"),
    ({"cuda_graph_scope": ["full_iteration", "attn"]}, r"full_iteration graphs the whole iteration \(give it alone\)"),
    ({"cuda_graph_scope": ["moe"]}, r"moe graphs only drop-and-pad"),
    ({"cuda_graph_scope": ["attn"], "cuda_graphs": False}, r"contradicts cuda_graphs: false"),
    ({"cuda_graph_scope": 3}, r"training.cuda_graph_scope: expected a list of scope names"),
    ({"cuda_graph_scope": ["attn"], "recompute": "full"}, r"recompute: full only under a full_iteration graph"),
])
def test_bad_scopes_fail_on_load_in_one_line(training, pattern):
    with pytest.raises(InputError, match=pattern) as exc:
        _cluster(**training)
    assert "\n" not in str(exc.value)


def test_moe_scopes_on_a_dense_model_and_mlp_on_an_all_moe_model_are_refused():
    with pytest.raises(InputError, match="MoE scopes on a model without MoE layers"):
        _cluster(cuda_graph_scope=["moe_router"]).check_against(load_model("llama3-8b"))
    with pytest.raises(InputError, match="mlp graphs dense MLPs"):
        _cluster(cuda_graph_scope=["mlp"]).check_against(load_model("qwen3-30b-a3b"))


def test_cli_refuses_a_bad_scope_in_one_line(ppplan, tmp_path):
    data = copy.deepcopy(BASE)
    data["training"]["cuda_graph_scope"] = ["moe_preprocess"]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    result = ppplan("profile", "qwen3-30b-a3b", "--analytical", "--cluster", str(path), "--out",
                    str(tmp_path / "p.json"))
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: training.cuda_graph_scope")


# -- CUDA-graph scopes: Megatron export, checked by megatron-core --------------------------------

config_mod = pytest.importorskip("megatron.core.transformer.transformer_config",
                                 reason="megatron-core not installed (pip install -e '.[frameworks]')")


from test_targets_megatron import _flags  # noqa: E402  (same tests folder: one flag reader)


def _megatron_config(flags: dict[str, list[str]], *, moe: bool, **extra):
    kw = dict(num_layers=4, hidden_size=64, num_attention_heads=4,
              cuda_graph_impl=flags.get("cuda_graph_impl", ["none"])[0],
              cuda_graph_scope=flags.get("cuda_graph_scope", []),
              recompute_granularity=(flags.get("recompute_granularity") or [None])[0],
              recompute_modules=flags.get("recompute_modules"),
              **{k: float(flags[k][0]) for k in ("attention_dropout", "hidden_dropout") if k in flags}, **extra)
    if moe:
        kw.update(num_moe_experts=8, moe_router_topk=2, moe_grouped_gemm=True,
                  moe_token_dispatcher_type="alltoall")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return config_mod.TransformerConfig(**kw)


def _export(model: str, cluster: dict) -> dict[str, list[str]]:
    from planner.api import plan as api_plan
    from planner.export.megatron import megatron_args

    p = api_plan(model, cluster_from_dict(cluster), target="megatron", work=1.0)
    return _flags(megatron_args(p).args)


@pytest.mark.parametrize(("model", "scope", "impl"), [
    ("qwen3-30b-a3b", ["attn", "moe_router", "moe_preprocess"], "transformer_engine"),
    ("llama3-8b", ["full_iteration"], "local"),
])
def test_exported_scope_passes_megatron_core(model, scope, impl):
    cluster = copy.deepcopy(BASE)
    if model == "llama3-8b":
        cluster["parallel"] = {"pp": 2, "tp": 1, "ep": 1, "dp": 8}
    cluster["training"].update(cuda_graph_scope=scope, recompute="selective")
    flags = _export(model, cluster)
    assert flags["cuda_graph_impl"] == [impl] and flags["cuda_graph_scope"] == scope
    if "core_attn" in flags.get("recompute_modules", []):
        assert flags["attention_dropout"] == ["0"]  # graphed recomputation takes no dropout
    config = _megatron_config(flags, moe=model != "llama3-8b")
    assert [s.name for s in config.cuda_graph_scope] == scope


def test_boolean_exports_router_and_preprocess_and_no_graphs_export_nothing():
    cluster = copy.deepcopy(BASE)
    cluster["training"].update(cuda_graphs=True, recompute="selective")
    flags = _export("qwen3-30b-a3b", cluster)
    assert flags["cuda_graph_scope"] == ["moe_router", "moe_preprocess"]
    _megatron_config(flags, moe=True)
    cluster["training"].update(cuda_graphs=False)
    assert "cuda_graph_impl" not in _export("qwen3-30b-a3b", cluster)


def test_full_recompute_plan_exports_no_layer_graphs_and_passes_megatron_core():
    cluster = copy.deepcopy(BASE)
    cluster["training"].update(cuda_graphs=True, recompute="full")
    flags = _export("qwen3-30b-a3b", cluster)
    assert flags["recompute_granularity"] == ["full"] and "cuda_graph_impl" not in flags
    _megatron_config(flags, moe=True, recompute_method="uniform", recompute_num_layers=1)


def test_megatron_core_refuses_what_the_load_check_refuses():
    """The oracle agrees with ``check_scope``: moe_preprocess without moe_router, and full
    recomputation under layer graphs (the export's refusal)."""
    with pytest.raises(AssertionError, match="moe_preprocess"):
        _megatron_config({"cuda_graph_impl": ["transformer_engine"], "cuda_graph_scope": ["moe_preprocess"]},
                         moe=True)
    with pytest.raises(AssertionError, match="full recompute"):
        _megatron_config({"cuda_graph_impl": ["transformer_engine"], "cuda_graph_scope": ["attn"],
                          "recompute_granularity": ["full"]}, moe=False, recompute_method="uniform",
                         recompute_num_layers=1)
