"""``--target megatron`` plans export flag sets that Megatron's own code accepts.

Megatron-Core (``pip install megatron-core``, the ``frameworks`` extra) checks them:
``PipelineParallelLayerLayout`` parses and validates every layout, and
``TransformerConfig.__post_init__`` runs Megatron's own config checks (moe_act needs
grouped GEMM, the EP-overlap requirements, recompute rules, layout against num_layers).
Megatron-LM's ``validate_args`` (``megatron/training/arguments.py``) is not in any wheel
on the package index, so the rules read there are checked here, each citing its lines.
"""

from __future__ import annotations

import functools
import warnings

import pytest

from planner.api import plan as api_plan
from planner.core.hf_config import load_model
from planner.export.megatron import megatron_args

SHIPPED = ("llama3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3")

layout_mod = pytest.importorskip("megatron.core.transformer.pipeline_parallel_layer_layout",
                                 reason="megatron-core not installed (pip install -e '.[frameworks]')")
config_mod = pytest.importorskip("megatron.core.transformer.transformer_config",
                                 reason="megatron-core not installed (pip install -e '.[frameworks]')")


@functools.lru_cache(maxsize=None)
def megatron_plan(model: str, vpp: int = 1):
    # ppplan's model of Megatron's interleaved order needs microbatches divisible by pp; DeepSeek-V3's
    # 120 sequences per replica are not (16 x 128 replicas = 16384 sequences are)
    batch = 16384 if model == "deepseek-v3" and vpp > 1 else None
    return api_plan(model, target="megatron", vpp=vpp, work=2.0, global_batch=batch)


def _flags(args: list[str]) -> dict[str, list[str]]:
    """``--name v1 v2`` -> {name: [v1, v2]} (switches map to [])."""
    out: dict[str, list[str]] = {}
    key = None
    for a in args:
        if a.startswith("--"):
            key = a[2:].replace("-", "_")
            out[key] = []
        else:
            out[key].append(a)
    return out


def _validate_args_rules(flags: dict[str, list[str]], pp: int) -> int:
    """Rules of Megatron-LM ``validate_args`` (megatron/training/arguments.py at d98e8a6):
    returns the virtual pipeline size it derives."""
    # lines 928-939: at most one of the vpp forms
    assert sum(k in flags for k in ("num_layers_per_virtual_pipeline_stage",
                                    "num_virtual_stages_per_pipeline_rank",
                                    "pipeline_model_parallel_layout")) <= 1
    # lines 941-952: layout stages divisible by pp; vpp = stages // pp
    stages = layout_mod.PipelineParallelLayerLayout.get_num_stages_from_str(
        flags["pipeline_model_parallel_layout"][0])
    assert stages % pp == 0
    # lines 1353-1356: max_position_embeddings >= seq_length
    assert int(flags["max_position_embeddings"][0]) >= int(flags["seq_length"][0])
    # lines 1425-1428: selective recomputation takes no recompute method
    if flags.get("recompute_granularity") == ["selective"]:
        assert "recompute_method" not in flags
    return stages // pp


def _transformer_config(model: str, flags: dict[str, list[str]], vpp: int):
    """Megatron-Core's ``TransformerConfig`` from the exported flags and the model's sizes (what
    ``core_transformer_config_from_args`` passes through)."""
    import torch

    spec = load_model(model)
    one = lambda k, cast=int: cast(flags[k][0]) if k in flags else None  # noqa: E731
    kw = dict(num_layers=one("num_layers"), hidden_size=spec.hidden, num_attention_heads=16,
              tensor_model_parallel_size=one("tensor_model_parallel_size"),
              context_parallel_size=one("context_parallel_size") or 1,
              cp_comm_type=one("cp_comm_type", str),
              pipeline_model_parallel_size=one("pipeline_model_parallel_size"),
              virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
              pipeline_model_parallel_layout=flags["pipeline_model_parallel_layout"][0],
              pipeline_dtype=torch.bfloat16, bf16="bf16" in flags,
              sequence_parallel="sequence_parallel" in flags,
              mtp_num_layers=one("mtp_num_layers"),
              recompute_granularity=one("recompute_granularity", str),
              recompute_method=one("recompute_method", str),
              recompute_num_layers=one("recompute_num_layers"),
              recompute_modules=flags.get("recompute_modules"),
              overlap_moe_expert_parallel_comm="overlap_moe_expert_parallel_comm" in flags,
              delay_wgrad_compute="delay_wgrad_compute" in flags,
              cuda_graph_impl=one("cuda_graph_impl", str) or "none", cuda_graph_scope=flags.get("cuda_graph_scope", []),
              **{k: float(flags[k][0]) for k in ("attention_dropout", "hidden_dropout") if k in flags})
    if spec.moe is not None:
        kw.update(num_moe_experts=spec.moe.num_experts, moe_router_topk=spec.moe.top_k,
                  moe_grouped_gemm="moe_grouped_gemm" in flags,
                  expert_model_parallel_size=one("expert_model_parallel_size"),
                  expert_tensor_parallel_size=one("expert_tensor_parallel_size"),
                  moe_token_dispatcher_type=one("moe_token_dispatcher_type", str) or "allgather",
                  moe_expert_capacity_factor=one("moe_expert_capacity_factor", float),
                  moe_pad_expert_input_to_capacity="moe_pad_expert_input_to_capacity" in flags)
    config = config_mod.MLATransformerConfig if spec.mla is not None else config_mod.TransformerConfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return config(**kw)


@pytest.mark.parametrize("vpp", [1, 2])
@pytest.mark.parametrize("model", SHIPPED)
def test_megatron_target_flags_pass_megatrons_checks(model, vpp):
    plan = megatron_plan(model, vpp)
    assert plan.extra["target"] == "megatron"
    args = megatron_args(plan).args
    flags = _flags(args)
    pp = int(flags["pipeline_model_parallel_size"][0])
    got_vpp = _validate_args_rules(flags, pp)
    assert got_vpp == plan.num_stages // plan.pp == vpp
    spec = load_model(model)
    layout = layout_mod.PipelineParallelLayerLayout(flags["pipeline_model_parallel_layout"][0], pp)
    n_mtp = int(flags.get("mtp_num_layers", ["0"])[0])
    layout.validate_layer_layout(num_layers=spec.num_decoder_layers, mtp_num_layers=n_mtp)
    _transformer_config(model, flags, vpp)  # raises on any rule Megatron-Core enforces
    if spec.moe is None:
        assert "moe_act" not in flags.get("recompute_modules", [])


@pytest.mark.parametrize("model, modules", [
    ("qwen3-30b-a3b", "moe_act,layernorm"), ("qwen3-30b-a3b", "moe,core_attn"),
    ("deepseek-v3", "mla_up_proj,layernorm,shared_experts"), ("llama3-8b", "mlp,layernorm"),
])
def test_module_set_plan_flags_pass_megatrons_checks(model, modules):
    """A ``--recompute-modules`` plan exports selective granularity with exactly its modules, and
    Megatron-Core's ``TransformerConfig`` (``MLATransformerConfig`` for MLA) accepts them."""
    batch = 16384 if model == "deepseek-v3" else None
    plan = api_plan(model, target="megatron", recompute_modules=modules, work=0.2, global_batch=batch)
    flags = _flags(megatron_args(plan).args)
    _validate_args_rules(flags, int(flags["pipeline_model_parallel_size"][0]))
    assert flags["recompute_granularity"] == ["selective"]
    assert sorted(flags["recompute_modules"]) == sorted(modules.split(","))
    config = _transformer_config(model, flags, plan.num_stages // plan.pp)
    assert config.recompute_modules == flags["recompute_modules"]


@pytest.mark.parametrize("kw, message", [
    (dict(moe_grouped_gemm=False, recompute_granularity="selective", recompute_modules=["moe_act"]),
     "moe_act in recompute_modules is only supported with moe_grouped_gemm"),
    (dict(recompute_granularity="selective", recompute_modules=["mla_up_proj"]),
     "mla_up_proj in recompute_modules is only supported with multi_latent_attention"),
])
def test_megatron_core_refuses_what_the_companion_flags_prevent(kw, message):
    """The checks the test relies on are live in the installed megatron-core."""
    with pytest.raises(ValueError, match=message):
        config_mod.TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_moe_experts=4, **kw)


def test_ep_overlap_plan_carries_its_companion_flags():
    plan = megatron_plan("qwen3-30b-a3b", 2)
    flags = _flags(megatron_args(plan).args)
    if "overlap_moe_expert_parallel_comm" not in flags:
        pytest.skip("the fastest megatron plan here does not use the EP overlap")
    assert flags["moe_token_dispatcher_type"] == ["alltoall"] and "bf16" in flags
    assert flags.get("recompute_granularity") != ["full"]


def test_context_parallel_plan_exports_its_size(tmp_path):
    """A cp 2 plan says so to Megatron (``--context-parallel-size``), and Megatron-Core takes it."""
    cluster = tmp_path / "cp2.yaml"
    cluster.write_text("gpu: h100\nnum_gpus: 16\ngpus_per_node: 8\n"
                       "parallel: {pp: 4, vpp: 1, tp: 1, ep: 1, cp: 2, dp: 2}\n"
                       "training: {global_batch: 64, seq_len: 16384, micro_batch_size: 1, precision: bf16}\n")
    plan = api_plan("llama3-8b", str(cluster), target="megatron", work=1.0)
    flags = _flags(megatron_args(plan).args)
    assert flags["context_parallel_size"] == ["2"]
    assert _transformer_config("llama3-8b", flags, 1).context_parallel_size == 2


def test_cp_comm_type_p2p_is_exported_and_torch_ring_is_refused_for_megatron(tmp_path):
    """``training.cp_comm_type: p2p`` exports ``--cp-comm-type p2p``, which Megatron-Core's
    ``TransformerConfig`` takes; torch's ring is not Megatron's and is refused in one line."""
    from planner.core.errors import InputError

    body = ("gpu: h100\nnum_gpus: 16\ngpus_per_node: 8\n"
            "parallel: {pp: 4, vpp: 1, tp: 1, ep: 1, cp: 2, dp: 2}\n"
            "training: {global_batch: 64, seq_len: 16384, micro_batch_size: 1, precision: bf16, "
            "cp_comm_type: %s}\n")
    cluster = tmp_path / "p2p.yaml"
    cluster.write_text(body % "p2p")
    flags = _flags(megatron_args(api_plan("llama3-8b", str(cluster), target="megatron", work=1.0)).args)
    assert flags["cp_comm_type"] == ["p2p"]
    assert _transformer_config("llama3-8b", flags, 1).cp_comm_type == "p2p"
    torch_ring = tmp_path / "torch.yaml"
    torch_ring.write_text(body % "torch_allgather")
    with pytest.raises(InputError, match="training.cp_comm_type.*--target megatron does not run"):
        api_plan("llama3-8b", str(torch_ring), target="megatron", work=1.0)


def test_module_set_plan_passes_the_megatron_and_bridge_checks_of_the_round_trip(tmp_path):
    """The same checkers the round trip runs (``benchmarks/frameworks.py``): Megatron-Core's
    ``TransformerConfig`` on the exported flags and Megatron-Bridge's recipe fields."""
    from benchmark_modules import load_benchmark

    frameworks = load_benchmark("frameworks", "frameworks_modules_t")
    plan = api_plan("qwen3-30b-a3b", target="megatron", recompute_modules="moe_act,layernorm", work=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frameworks.check_megatron_core(plan, tmp_path)
        frameworks.check_megatron_bridge(plan, tmp_path)
