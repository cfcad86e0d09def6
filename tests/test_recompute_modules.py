"""Megatron's recompute modules (``--recompute-modules``): each module's saved activations and
added backward time against a hand computation from Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", section 4) as ``profiler.analytical`` counts a layer;
the module list from a cluster file and the command line, refused in one line when wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.api import load_model
from planner.core.cluster import cluster_from_dict, default_cluster_path, load_cluster
from planner.core.errors import InputError
from planner.core.recompute import module_set, parse_modules
from profiler.analytical import analytical_costs
from profiler.cost_model.context import HBM_EFF

ROOT = Path(__file__).resolve().parents[1]


def _layer(model: str, mode: str, *, tp: int = 1):
    """The last decoder layer's cost under ``mode``, BF16, on the model's shipped cluster."""
    spec = load_model(model)
    cl = load_cluster(default_cluster_path(model))
    cl = cl.with_parallel(tp=tp, dp=cl.parallel.dp // tp) if tp > 1 else cl
    cl = cl.with_recompute(mode).check_against(spec)
    return [layer for layer in analytical_costs(spec, cl).layers if layer.role == "decoder"][-1], spec, cl


def _delta(model: str, modules: str, **kw):
    """(act bytes saved, input-gradient seconds added, backward all-to-all seconds added), and
    the no-recompute layer, model and cluster."""
    base, spec, cl = _layer(model, "none", **kw)
    got, _, _ = _layer(model, module_set(modules.split(","), field="test"), **kw)
    return (base.act_bytes - got.act_bytes, got.i - base.i, got.a2a_b - base.a2a_b), base, spec, cl


def _mem_s(cl, nbytes: float) -> float:
    """Memory-bound seconds: bytes over 80% of HBM bandwidth (``cost_model.context``)."""
    return nbytes / (cl.gpu.hbm_bandwidth * HBM_EFF)


def test_layernorm_drops_both_norm_outputs():
    # Korthikanti: the two layer norms store 4sbh bytes, over t with sequence parallelism
    (saved, added, a2a), base, spec, cl = _delta("llama3-8b", "layernorm", tp=2)
    local_h = cl.training.seq_len / 2 * spec.hidden
    assert saved == pytest.approx(2 * local_h * 2, abs=2)
    assert added == pytest.approx(2 * _mem_s(cl, 2 * local_h * 2))  # each norm reads and writes sbh/t
    assert a2a == 0


def test_moe_act_drops_the_expert_activation_output():
    (saved, added, a2a), base, spec, cl = _delta("qwen3-30b-a3b", "moe_act")
    copies = cl.training.seq_len * spec.moe.top_k * base.imbalance  # token copies on the busiest GPU
    inter = spec.moe.expert_intermediate
    assert saved == pytest.approx(copies * inter * 2, abs=2)  # the SwiGLU output, the down-proj input
    assert added == pytest.approx(_mem_s(cl, 3 * copies * inter * 2))  # read gate and up, write the product
    assert a2a == 0


def test_core_attn_adds_the_core_forward_and_saves_nothing_under_flash_attention():
    (saved, added, _), base, spec, cl = _delta("llama3-8b", "core_attn")
    a, s = spec.attention, cl.training.seq_len
    core_flops = 2 * s * a.num_heads * 2 * a.head_dim * s / 2  # causal QK^T and PV
    assert saved == 0  # the fused kernel keeps no s x s tensor (Korthikanti's 5as^2b is gone)
    assert added == pytest.approx(core_flops / (cl.gpu.peak_flops * 0.61))  # cuDNN forward share


def test_mlp_drops_the_dense_intermediates():
    (saved, added, _), base, spec, cl = _delta("llama3-8b", "mlp")
    assert saved == pytest.approx(cl.training.seq_len * 3 * spec.intermediate * 2, abs=2)  # gate, up, act
    assert 0 < added < base.f


def test_moe_reruns_the_whole_layer_and_its_all_to_alls():
    (saved, added, a2a), base, spec, cl = _delta("qwen3-30b-a3b", "moe")
    local, m = cl.training.seq_len, spec.moe
    copies = local * m.top_k * base.imbalance
    # router probabilities (2 per expert), permuted tokens in and out, expert gate/up/act outputs
    assert saved == pytest.approx((local * m.num_experts * 2 + copies * (2 * spec.hidden + 3 * m.expert_intermediate)) * 2,
                                  abs=4)
    assert a2a == pytest.approx(base.a2a_f)  # dispatch and combine again in the backward
    (act_saved, act_added, _), *_ = _delta("qwen3-30b-a3b", "moe_act")
    assert added > act_added
    # moe holds moe_act: naming both changes nothing
    assert _delta("qwen3-30b-a3b", "moe,moe_act")[0] == pytest.approx((saved, added, a2a))


def test_shared_experts_and_mla_up_proj():
    (saved, added, a2a), base, spec, cl = _delta("deepseek-v3", "shared_experts")
    s = cl.training.seq_len
    assert saved == pytest.approx(s * 3 * spec.moe.shared_intermediate * 2, abs=2) and added > 0 and a2a == 0
    (saved, added, _), base, spec, cl = _delta("deepseek-v3", "mla_up_proj")
    a = spec.mla
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    assert saved == pytest.approx(s * a.num_heads * (2 * qk + a.v_head_dim) * 2, abs=2)  # Q, K and V
    assert added > 0


def test_the_largest_dropped_module_comes_back_as_transient_bytes():
    got, *_ = _layer("qwen3-30b-a3b", "modules:moe_act,layernorm")
    (act_saved, *_), *_ = _delta("qwen3-30b-a3b", "moe_act")
    (norm_saved, *_), *_ = _delta("qwen3-30b-a3b", "layernorm")
    assert got.work_bytes == pytest.approx(max(act_saved, norm_saved), abs=4)


def test_module_lists_are_canonical_and_checked():
    assert module_set(["layernorm", "moe_act", "layernorm"], field="f") == "modules:moe_act,layernorm"
    assert parse_modules("moe_act, layernorm", field="f") == "modules:moe_act,layernorm"
    with pytest.raises(InputError, match="--recompute-modules: unknown recompute module 'moe_ac'"):
        parse_modules("moe_ac", field="--recompute-modules")
    with pytest.raises(InputError, match="no module given"):
        parse_modules(",", field="--recompute-modules")


def _cluster_dict(recompute):
    return {"gpu": "H100", "num_gpus": 8, "parallel": {"pp": 2, "ep": 4, "dp": 4},
            "training": {"global_batch": 64, "seq_len": 4096, "recompute": recompute}}


def test_cluster_file_takes_a_module_list():
    cl = cluster_from_dict(_cluster_dict(["layernorm", "moe_act"]))
    assert cl.training.recompute == "modules:moe_act,layernorm"
    with pytest.raises(InputError, match="cluster.training.recompute: unknown recompute module 'attn'"):
        cluster_from_dict(_cluster_dict(["attn"]))
    with pytest.raises(InputError, match="llama3-8b has no moe_act module"):
        cl.check_against(load_model("llama3-8b"))
    with pytest.raises(InputError, match="has no mla_up_proj"):
        cluster_from_dict(_cluster_dict(["mla_up_proj"])).check_against(load_model("qwen3-30b-a3b"))


@pytest.mark.parametrize("argv, message", [
    (["--recompute-modules", "moe_act,bogus", "--target", "megatron"], "unknown recompute module 'bogus'"),
    (["--recompute-modules", "moe_act"], "torch recomputes no module list"),
    (["--recompute-modules", "moe_act", "--recompute", "full", "--target", "megatron"], "given with --recompute full"),
    (["--recompute-modules", "mla_up_proj", "--target", "megatron"], "has no mla_up_proj module"),
])
def test_bad_module_requests_are_one_line_exit_2(ppplan, tmp_path, argv, message):
    got = ppplan("plan", "qwen3-30b-a3b", *argv, "--out", "p.json", "--quiet")
    assert got.code == 2 and message in got.err and len(got.err.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_module_set_plan_records_its_mode_and_exports_megatrons_flags(ppplan, tmp_path):
    made = ppplan("plan", "qwen3-30b-a3b", "--target", "megatron", "--recompute-modules", "layernorm,moe_act",
                  "--work", "0.2", "--out", "p.json", "--quiet")
    assert made.code == 0, made.err
    out = ppplan("export", "p.json", "--format", "megatron", "--out", "args.txt")
    assert out.code == 0, out.err
    assert "--recompute-granularity selective --recompute-modules moe_act layernorm" in (tmp_path / "args.txt").read_text()
    refused = ppplan("export", "p.json", "--format", "torchtitan", "--out", "t.toml")
    assert refused.code == 2 and "Megatron's modules moe_act, layernorm" in refused.err
    replay = ppplan("replay", "p.json")  # the replay's torch layers recompute whole layers or mixers only
    assert replay.code == 2 and "recomputes Megatron's modules" in replay.err
    assert len(replay.err.strip().splitlines()) == 1


def test_a_choice_of_module_lists_plans_each_and_keeps_the_one_that_fits(ppplan, tmp_path):
    """Qwen3-235B-A22B at 16k tokens on the long-context run's layout: moe_act + layernorm does
    not fit, layernorm + moe (what the run recomputed) does; both are recorded as candidates."""
    cluster = ROOT / "benchmarks/data/clusters/modelzoo-20251104-h100-qwen3-235b-a22b-seq16k-cp1.yaml"
    made = ppplan("plan", "qwen3-235b-a22b", "--cluster", str(cluster), "--target", "megatron",
                  "--recompute-modules", "moe_act,layernorm", "--recompute-modules", "layernorm,moe",
                  "--work", "3", "--out", "p.json", "--quiet")
    assert made.code == 0, made.err
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["cluster"]["training"]["recompute"] == "modules:layernorm,moe"
    tried = {e["recompute"]: e["status"] for e in plan["solver"]["candidates"] if "recompute" in e}
    assert tried == {"modules:moe_act,layernorm": "infeasible", "modules:layernorm,moe": "valid"}


def test_cluster_file_takes_a_choice_and_a_table_takes_one_set():
    cl = cluster_from_dict(_cluster_dict([["moe_act", "layernorm"], ["layernorm", "moe"]]))
    assert cl.training.recompute_modes() == ("modules:moe_act,layernorm", "modules:layernorm,moe")
    spec = load_model("qwen3-30b-a3b")
    with pytest.raises(InputError, match="a cost table is for one module set"):
        analytical_costs(spec, cl.check_against(spec))
