"""Cost-model parts (issue 18): GEMM shape, FP8, hierarchical all-to-all, dispatchers,
CP / ETP / FSDP, the closed-form step estimate and its memory against a measured peak."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from planner.core.cluster import cluster_from_dict
from planner.core.errors import InputError
from planner.core.hardware import GPU_PRESETS
from planner.core.hf_config import load_model
from planner.core.layer_math import layer_params
from planner.core.stage_costs import stage_costs
from planner.planning.estimate import estimate_step
from profiler.analytical import analytical_costs
from profiler.cost_model.fitted import BOUNDS, FITTED, GEMM_DIM_HALF, GEMM_FP8_DIM_HALF, GEMM_FP8_SCALE, FittedConstants
from profiler.cost_model.comm import a2a_seconds, remote_nodes_per_token
from profiler.cost_model.context import EAGER_SLOWDOWN
from profiler.cost_model.gemm import gemm_efficiency
from profiler.cost_model.mixer import FLASH_EFF

BASE = {"gpu": "h100", "num_gpus": 16, "gpus_per_node": 8,
        "parallel": {"pp": 1, "tp": 1, "ep": 8, "dp": 16},
        "training": {"global_batch": 256, "seq_len": 4096, "micro_batch_size": 1, "recompute": "none"}}
DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "published_runs.json"
H200 = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "gpu_check_h200.json"


def _cluster(**changes):
    data = copy.deepcopy(BASE)
    for path, value in changes.items():
        *head, last = path.split("__")
        node = data
        for key in head:
            node = node.setdefault(key, {})
        node[last] = value
    return cluster_from_dict(data)


def _moe_layer(table, spec):
    return next(lc for lc, layer in zip(table.layers, spec.layers) if layer.is_moe)


def test_narrow_gemms_are_less_efficient_than_wide_ones():
    for cal in (FITTED, FittedConstants(gemm_eff_max=0.7, gemm_dim_half=512.0, grouped_gemm_eff=1.0,
                                    moe_layer_overhead_s=0.0)):
        wide = gemm_efficiency(4096, 14336, 4096, cal)
        narrow = gemm_efficiency(4096, 768, 2048, cal)
        assert narrow < 0.9 * wide < cal.gemm_eff_max


def _gpu_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", H200.parent.parent / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_check", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_gemm_shape_constants_are_the_fit_of_the_measured_h200_rates():
    curves = _gpu_check().shape_curves(json.loads(H200.read_text())["gemms"])
    assert curves["bf16"]["dim_half"] == GEMM_DIM_HALF and curves["bf16"]["shapes"] == 8
    assert curves["fp8"]["dim_half"] == GEMM_FP8_DIM_HALF
    assert round(curves["fp8"]["scale"] / curves["bf16"]["scale"], 3) == GEMM_FP8_SCALE


def test_fp8_gains_less_over_bf16_on_narrow_gemms_as_measured():
    """The model's FP8-over-BF16 speed-up per shape follows the H200's: 1.80x on a wide dense
    GEMM, 1.19x on Qwen3-30B-A3B's 4096 x 1536 x 2048 experts (a single curve gave 2.1x both)."""
    gemms = {(g["m"], g["n"], g["k"]): g for g in json.loads(H200.read_text())["gemms"]}
    for shape in ((4096, 18432, 7168), (4096, 7168, 7168), (4096, 1536, 2048), (512, 4096, 7168)):
        measured = gemms[shape]["bf16"]["seconds"] / gemms[shape]["fp8"]["seconds"]
        model = 2.0 * gemm_efficiency(*shape, FITTED, fp8=True) / gemm_efficiency(*shape, FITTED)
        assert model == pytest.approx(measured, rel=0.15), shape


def test_fp8_barely_speeds_up_narrow_expert_gemms():
    """Qwen3-30B-A3B's 768-wide experts at EP 8 see a few hundred rows each: on the FP8 curve
    they gain almost nothing over BF16 (the H200 ran such GEMMs at 1.0-1.2x), Llama's wide
    dense GEMMs about 1.6x."""
    ratios = {}
    for name, ep in (("llama3-8b", 1), ("qwen3-30b-a3b", 8)):
        spec = load_model(name)
        bf16 = analytical_costs(spec, _cluster(parallel__ep=ep))
        fp8 = analytical_costs(spec, _cluster(parallel__ep=ep, training__precision="fp8"))
        ratios[name] = fp8.layers[1].w / bf16.layers[1].w
    assert ratios["llama3-8b"] < 0.7 and ratios["qwen3-30b-a3b"] > 0.9, ratios


def test_fp8_speeds_up_block_gemms_only():
    spec = load_model("llama3-8b")
    bf16 = analytical_costs(spec, _cluster(parallel__ep=1))
    fp8 = analytical_costs(spec, _cluster(parallel__ep=1, training__precision="fp8"))
    dec_b, dec_8 = bf16.layers[1], fp8.layers[1]
    assert 0.4 * dec_b.w < dec_8.w < 0.75 * dec_b.w  # W is all block GEMMs
    assert fp8.layers[-1].w == pytest.approx(bf16.layers[-1].w)  # LM head stays BF16


def test_ep16_over_two_nodes_is_not_priced_all_at_the_network_rate():
    spec = load_model("qwen3-30b-a3b")
    t8 = a2a_seconds(_cluster(parallel__ep=8), spec, 4096, 4096)
    t16 = a2a_seconds(_cluster(parallel__ep=16), spec, 4096, 4096)
    t16_deepep = a2a_seconds(_cluster(parallel__ep=16, network={"dispatcher": "deepep"}), spec, 4096, 4096)
    assert t8 < t16 < 3.5 * t8
    assert t16_deepep < t16  # one copy per remote node


def test_node_limited_routing_caps_remote_copies():
    ds = load_model("deepseek-v3")
    qwen = load_model("qwen3-235b-a22b")
    assert remote_nodes_per_token(ds, 8) == pytest.approx(4 * 7 / 8)
    assert remote_nodes_per_token(qwen, 8) > 4 * 7 / 8


def test_dispatcher_sm_share_is_the_overlap_slowdown():
    spec = load_model("qwen3-30b-a3b")
    table = analytical_costs(spec, _cluster(network={"dispatcher": "deepep"}))
    assert table.meta["contention"] == pytest.approx(20 / 132) and table.meta["dispatcher"] == "deepep"


def test_context_parallel_splits_tokens_and_pays_the_ring():
    spec = load_model("llama3-8b")
    cp1 = analytical_costs(spec, _cluster(parallel__ep=1, training__seq_len=32768, training__global_batch=64))
    cp2 = analytical_costs(spec, _cluster(parallel={"pp": 1, "tp": 1, "ep": 1, "cp": 2, "dp": 8},
                                          training__seq_len=32768, training__global_batch=64))
    assert cp2.layers[1].act_bytes == pytest.approx(cp1.layers[1].act_bytes / 2, rel=0.01)
    assert 0.45 * cp1.layers[1].f < cp2.layers[1].f < 0.6 * cp1.layers[1].f


def test_expert_tensor_parallel_and_fsdp_shard_memory():
    spec = load_model("qwen3-30b-a3b")
    base = _moe_layer(analytical_costs(spec, _cluster()), spec)
    etp = _moe_layer(analytical_costs(spec, _cluster(parallel__etp=2)), spec)
    fsdp = _moe_layer(analytical_costs(spec, _cluster(training__fsdp=True)), spec)
    assert etp.param_bytes < 0.65 * base.param_bytes  # routed experts halve, attention does not
    assert fsdp.param_bytes < 0.5 * base.param_bytes and fsdp.grad_bytes < 0.5 * base.grad_bytes


def test_step_estimate_adds_optimizer_and_bubble():
    spec = load_model("qwen3-30b-a3b")
    one = estimate_step(spec, _cluster())
    pp = estimate_step(spec, _cluster(parallel={"pp": 4, "tp": 1, "ep": 4, "dp": 4}))
    assert one.optimizer_s > 0 and one.bubble_s == 0 and pp.bubble_s > 0
    assert one.tokens_per_s_per_gpu * 16 * one.step_s == pytest.approx(256 * 4096)


def test_memory_matches_every_published_peak_within_10_percent():
    """Static bytes plus the activations of the microbatches in flight against the published
    peak, under the schedule the run used: a run with EP overlap (Megatron's combined 1F1B) is
    estimated with fused F&B pairs, which free the backward's activations as the forward
    allocates its own (``StageCosts.memory_order``), so with one stage they hold what plain
    1F1B holds, one microbatch, not two."""
    rows = json.loads(DATA.read_text())["memory_rows"]
    assert rows
    for row in rows:
        cluster = cluster_from_dict({
            "gpu": row["gpu"], "num_gpus": row["num_gpus"],
            "parallel": {"pp": row["pp"], "tp": row["tp"], "ep": row["ep"],
                         "dp": row["num_gpus"] // (row["pp"] * row["tp"])},
            "training": {"global_batch": row["gbs"], "seq_len": row["seq_len"], "micro_batch_size": row["mbs"],
                         "recompute": row["recompute"], "memory_headroom": 0.0},
            "network": {"dispatcher": row["dispatcher"]}})
        spec = load_model(row["model"])
        est = estimate_step(spec, cluster, overlap=bool(row["moe_a2a_overlap"]))
        assert est.peak_memory_bytes / 2**30 == pytest.approx(row["measured_peak_allocated_gib"], rel=0.10)
        if row["moe_a2a_overlap"] and row["pp"] == 1:
            assert est.peak_memory_bytes == estimate_step(spec, cluster, overlap=False).peak_memory_bytes


def test_fitted_constants_round_trip():
    assert FittedConstants.from_tuple(FITTED.as_tuple()) == FITTED


def test_eager_kernels_slow_compute_by_the_measured_compile_ratio_and_run_flash_attention_2():
    spec = load_model("llama3-8b")
    fused = analytical_costs(spec, _cluster(parallel__ep=1), size_curve_sizes=())
    eager = analytical_costs(spec, _cluster(parallel__ep=1, training__kernels="eager"), size_curve_sizes=())
    assert eager.layers[1].w == pytest.approx(EAGER_SLOWDOWN * fused.layers[1].w)  # W: GEMMs only
    assert eager.layers[1].i > EAGER_SLOWDOWN * fused.layers[1].i  # + FlashAttention-2's slower backward
    assert FLASH_EFF["flash2"][0] < FLASH_EFF["cudnn"][0] and FLASH_EFF["flash2"][1] < FLASH_EFF["cudnn"][1]


def test_cuda_graphs_drop_the_per_moe_layer_host_overhead():
    spec = load_model("qwen3-30b-a3b")
    cal = FittedConstants(gemm_eff_max=0.6, gemm_dim_half=500.0, grouped_gemm_eff=1.0, moe_layer_overhead_s=1e-3)
    eager = _moe_layer(analytical_costs(spec, _cluster(), constants=cal, size_curve_sizes=()), spec)
    graphs = _moe_layer(analytical_costs(spec, _cluster(training__cuda_graphs=True), constants=cal,
                                         size_curve_sizes=()), spec)
    assert eager.f - graphs.f == pytest.approx(1e-3) and eager.i - graphs.i == pytest.approx(1e-3)


def test_grand_teton_h100_preset_is_slower_than_the_sxm():
    slow, sxm = GPU_PRESETS["h100-hbm2e-500w"], GPU_PRESETS["h100"]
    assert slow.hbm_bandwidth == 2.4e12 and slow.memory_bytes == 96e9
    assert sxm.peak_flops * 835 / 989 < slow.peak_flops < sxm.peak_flops  # between H100 NVL (400 W) and SXM


@pytest.mark.parametrize(("field", "value", "message"), [
    ("kernels", "compiled", r"training.kernels: unknown 'compiled' \(use one of fused, eager\)"),
    ("cuda_graphs", "yes", r"training.cuda_graphs: expected bool, got 'yes'"),
])
def test_new_training_fields_reject_bad_values_in_one_line(field, value, message):
    with pytest.raises(InputError, match=message) as exc:
        _cluster(**{f"training__{field}": value})
    assert "\n" not in str(exc.value)


def test_plan_records_dp_traffic_and_optimizer_beside_the_schedule():
    from planner.api import plan

    p = plan("llama3-8b", pp=2, work=1.0)
    pred = p.predicted
    assert pred["optimizer_s"] > 0 and pred["dp_exposed_s"] >= 0
    assert pred["optimizer_step_time_s"] == pytest.approx(pred["step_time_s"] + pred["dp_exposed_s"]
                                                          + pred["optimizer_s"])


def test_attention_kernel_flash2_is_slower_than_cudnn_and_auto_follows_kernels():
    spec = load_model("llama3-8b")
    base = {"parallel__ep": 1}
    cudnn = analytical_costs(spec, _cluster(**base, training__attention_kernel="cudnn"), size_curve_sizes=())
    flash2 = analytical_costs(spec, _cluster(**base, training__attention_kernel="flash2"), size_curve_sizes=())
    auto = analytical_costs(spec, _cluster(**base), size_curve_sizes=())
    assert flash2.layers[1].f > cudnn.layers[1].f and flash2.layers[1].i > cudnn.layers[1].i
    assert auto.layers[1].f == pytest.approx(cudnn.layers[1].f)  # fused kernels: cuDNN
    assert flash2.layers[1].w == pytest.approx(cudnn.layers[1].w)  # the GEMMs are the same


def test_the_loss_keeps_fp32_softmax_and_eager_cross_entropy_adds_two_fp32_logit_buffers():
    spec = load_model("llama3-8b")
    tokens = 4096  # micro-batch 1 x seq 4096, tp 1
    fused = analytical_costs(spec, _cluster(parallel__ep=1, training__cross_entropy="fused"))
    eager = analytical_costs(spec, _cluster(parallel__ep=1, training__cross_entropy="eager"))
    head_f, head_e = fused.layers[-1], eager.layers[-1]
    assert head_f.act_bytes >= tokens * spec.vocab * 4  # the FP32 softmax is saved
    assert head_f.work_bytes == 2 * tokens * spec.vocab
    assert head_e.work_bytes == 8 * tokens * spec.vocab
    assert all(lc.work_bytes == 0 for lc in eager.layers[:-1])
    assert head_e.static_bytes == head_f.static_bytes and head_e.act_bytes == head_f.act_bytes


def test_a_compiled_loss_keeps_bf16_logits_and_writes_a_bf16_gradient():
    """torch.compile fuses the FP32 upcast into the loss (torchtitan ``build_cross_entropy_loss``):
    2 bytes per logit saved instead of the FP32 log-softmax's 4, 2 of backward work instead of 8,
    and fewer bytes moved, so a faster head."""
    spec = load_model("llama3-8b")
    tokens = 4096
    eager = analytical_costs(spec, _cluster(parallel__ep=1, training__cross_entropy="eager")).layers[-1]
    comp = analytical_costs(spec, _cluster(parallel__ep=1, training__cross_entropy="compiled")).layers[-1]
    assert eager.act_bytes - comp.act_bytes == pytest.approx(2 * tokens * spec.vocab)
    assert comp.work_bytes == 2 * tokens * spec.vocab
    assert comp.f < eager.f and comp.static_bytes == eager.static_bytes


def test_full_recompute_holds_one_layers_rematerialised_activations_and_a_rank_holds_its_largest():
    spec = load_model("llama3-8b")
    none = analytical_costs(spec, _cluster(parallel__ep=1, training__recompute="none"))
    full = analytical_costs(spec, _cluster(parallel__ep=1, training__recompute="full"))
    assert full.layers[1].work_bytes == none.layers[1].act_bytes  # bf16: nothing saved in FP8
    assert none.layers[1].work_bytes == 0 and full.layers[1].act_bytes < none.layers[1].act_bytes / 10
    bounds = [(0, 17), (17, full.num_layers)]
    sc = stage_costs(full, bounds, [0, 1])
    per_layer = [lc.static_bytes for lc in full.layers]
    static = sc.static_per_rank()
    assert static[0] == sum(per_layer[:17]) + full.layers[1].work_bytes  # one layer at a time
    assert static[1] == sum(per_layer[17:]) + max(full.layers[1].work_bytes, full.layers[-1].work_bytes)


def test_fp8_keeps_a_full_recompute_checkpoint_in_bf16():
    spec = load_model("llama3-8b")
    bf16 = analytical_costs(spec, _cluster(parallel__ep=1, training__recompute="full"))
    fp8 = analytical_costs(spec, _cluster(parallel__ep=1, training__recompute="full", training__precision="fp8"))
    assert fp8.layers[1].act_bytes == bf16.layers[1].act_bytes


def test_fsdp_under_a_pipeline_holds_gathered_weights_and_fp32_gradients():
    spec = load_model("llama3-8b")
    n = layer_params(spec.layers[1], spec).dense  # one decoder layer, tp 1
    flat = analytical_costs(spec, _cluster(parallel={"pp": 1, "tp": 1, "ep": 1, "dp": 16},
                                           training__fsdp=True)).layers[1]
    piped = analytical_costs(spec, _cluster(parallel={"pp": 2, "tp": 1, "ep": 1, "dp": 8},
                                            training__fsdp=True)).layers[1]
    assert flat.param_bytes == pytest.approx(2 * n / 16, rel=1e-6)  # sharded only
    assert piped.param_bytes == pytest.approx(2 * n / 8 + 2 * n, rel=1e-6)  # + gathered BF16
    assert piped.grad_bytes == pytest.approx(4 * n / 8 + 4 * n, rel=1e-6)  # + unsharded FP32


def test_cluster_refuses_unknown_attention_kernel_cross_entropy_and_fp8_recipe():
    for path in ("training__attention_kernel", "training__cross_entropy", "training__fp8_recipe"):
        with pytest.raises(InputError, match=path.split("__")[1]):
            _cluster(**{path: "magic"})


def test_torchao_fp8_keeps_bf16_inputs_and_pays_its_amax_pass():
    spec = load_model("llama3-8b")
    te = analytical_costs(spec, _cluster(parallel__ep=1, training__precision="fp8"))
    ao = analytical_costs(spec, _cluster(parallel__ep=1, training__precision="fp8", training__fp8_recipe="torchao"))
    bf16 = analytical_costs(spec, _cluster(parallel__ep=1))
    assert ao.layers[1].act_bytes == bf16.layers[1].act_bytes > te.layers[1].act_bytes
    assert te.layers[1].w < ao.layers[1].w < bf16.layers[1].w  # still faster than BF16


def test_element_wise_work_runs_at_the_fitted_share_of_hbm_bandwidth_and_gemms_do_not():
    """``elementwise_eff`` prices the layer's memory-bound kernels only: halving it doubles the
    element-wise part of a dense layer's forward and leaves its weight gradient (GEMMs) alone."""
    spec = load_model("llama3-8b")
    cluster = _cluster(parallel__ep=1)
    at = {e: analytical_costs(spec, cluster, constants=FittedConstants(
        gemm_eff_max=0.8, gemm_dim_half=GEMM_DIM_HALF, grouped_gemm_eff=1.0, moe_layer_overhead_s=1e-3,
        elementwise_eff=e), size_curve_sizes=()).layers[1] for e in (0.8, 0.4, 0.2)}
    assert at[0.8].w == pytest.approx(at[0.4].w) == pytest.approx(at[0.2].w)
    step = at[0.4].f - at[0.8].f
    assert step > 0 and at[0.2].f - at[0.4].f == pytest.approx(2 * step)
    assert FITTED.elementwise_eff <= BOUNDS["elementwise_eff"][1]
