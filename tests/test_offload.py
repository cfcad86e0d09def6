"""Activation offloading (``training.offload``, ``--offload``): what leaves a layer's saved
activations and what the copy costs (``profiler.cost_model.offload``), checked against a hand
computation; bad values refused in one line; the Megatron export's offload fields accepted by
megatron-core's own ``TransformerConfig``, which refuses what the load checks refuse."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from dataclasses import replace

import pytest
import yaml

from planner.api import load_model, plan as api_plan
from planner.core.cluster import cluster_from_dict, default_cluster_path, load_cluster
from planner.core.errors import InputError
from planner.core.offload import offload_mode
from planner.export.megatron import megatron_args
from planner.export.megatron_bridge import bridge_settings
from profiler.analytical import analytical_costs

config_mod = pytest.importorskip("megatron.core.transformer.transformer_config",
                                 reason="megatron-core not installed (pip install -e '.[frameworks]')")


def _cluster(model: str, offload: str, **training):
    spec = load_model(model)
    cl = load_cluster(default_cluster_path(model)).with_parallel(pp=1)
    t = replace(cl.training, recompute="none", offload=offload, **training)
    return spec, replace(cl, training=t).check().check_against(spec)


def _decoder(spec, cl):
    return [lc for lc in analytical_costs(spec, cl, pairs=False).layers if lc.role == "decoder"][-1]


def test_layer_offload_keeps_the_other_layers_and_one_in_flight():
    spec, base_cl = _cluster("llama3-8b", "none")
    _, cl = _cluster("llama3-8b", "layers:8")
    base, got = _decoder(spec, base_cl), _decoder(spec, cl)
    decoders = sum(1 for x in spec.layers if x.role == "decoder")
    assert got.act_bytes == pytest.approx(base.act_bytes * (1 - 8 / decoders), abs=2)
    assert got.work_bytes == pytest.approx(base.work_bytes + base.act_bytes, abs=2)  # the layer in flight
    # a host link fast enough that the copy hides behind the layer's compute: nothing exposed
    fast = _decoder(spec, replace(cl, gpu=replace(cl.gpu, host_bandwidth=1e13)))
    assert (fast.f, fast.i) == pytest.approx((base.f, base.i))


def test_layer_offload_charges_the_copy_beyond_the_compute():
    spec, base_cl = _cluster("llama3-8b", "none")
    _, cl = _cluster("llama3-8b", "layers:8")
    base, got = _decoder(spec, base_cl), _decoder(spec, cl)
    decoders = sum(1 for x in spec.layers if x.role == "decoder")
    copy_s = base.act_bytes / 63e9  # H100's PCIe Gen5 x16, one direction: 1 GiB takes 16 ms, F is 9 ms
    assert copy_s > base.f
    assert got.f - base.f == pytest.approx(8 / decoders * (copy_s - base.f), rel=1e-6)
    assert got.i - base.i == pytest.approx(8 / decoders * max(0.0, copy_s - base.i - base.w), abs=1e-9)


def test_fine_grained_offload_moves_the_expert_inputs():
    spec, base_cl = _cluster("qwen3-30b-a3b", "none")
    _, cl = _cluster("qwen3-30b-a3b", offload_mode(["expert_fc1", "moe_act"], field="test"))
    base, got = _decoder(spec, base_cl), _decoder(spec, cl)
    copies = cl.training.micro_batch_size * cl.training.seq_len * spec.moe.top_k * base.imbalance / cl.parallel.tp
    inter = spec.moe.expert_intermediate
    moved = copies * spec.hidden * 2 + copies * 2 * inter * 2  # fc1 input and fc1 output, BF16
    assert base.act_bytes - got.act_bytes == pytest.approx(moved, rel=1e-6)
    assert base.act_w_bytes - got.act_w_bytes == pytest.approx(copies * spec.hidden * 2, rel=1e-6)
    assert got.work_bytes - base.work_bytes == pytest.approx(moved, rel=1e-6)  # the group kept on the GPU


def test_offload_frees_memory_in_a_plan_and_is_recorded():
    from planner.core.errors import InfeasibleError

    spec, cl = _cluster("llama3-8b", "none")
    with pytest.raises(InfeasibleError, match="no partition fits the memory limit"):  # pp 1 on 80 GB H100s
        api_plan("llama3-8b", cl, target="megatron", work=0.2)
    half = api_plan("llama3-8b", cl, target="megatron", work=0.2, offload="16")
    most = api_plan("llama3-8b", cl, target="megatron", work=0.2, offload="24")
    assert max(most.predicted.peak_memory_bytes) < max(half.predicted.peak_memory_bytes)
    assert half.cluster.settings.get("offload") == "layers:16"
    assert half.cluster.gpu.other["host_bandwidth"] == 63e9
    plain = api_plan("llama3-8b", target="megatron", work=0.2)
    assert "offload" not in plain.cluster.settings.other  # the default records nothing new
    assert "host_bandwidth" not in plain.cluster.gpu.other


@pytest.mark.parametrize("value, pattern", [
    (0, r"training\.offload: 0 layers"),
    (["expert_fc2"], r"unknown offload module 'expert_fc2'"),
    (["core_attn"], r"core_attn's input is not modelled"),
    (True, r"training\.offload: expected none"),
])
def test_bad_offload_values_are_refused_in_one_line(value, pattern):
    data = yaml.safe_load(default_cluster_path("llama3-8b").read_text())
    data["training"]["offload"] = value
    with pytest.raises(InputError, match=pattern):
        cluster_from_dict(data)


@pytest.mark.parametrize("changes, pattern", [
    (dict(pp=4), r"does not run with pp 4"),
    (dict(recompute="selective"), r"does not run with recompute 'selective'"),
    (dict(cuda_graphs=True), r"does not run with CUDA graphs"),
])
def test_layer_offload_is_refused_where_megatron_refuses_it(changes, pattern):
    data = copy.deepcopy(yaml.safe_load(default_cluster_path("llama3-8b").read_text()))
    pp = changes.pop("pp", 1)
    data["parallel"] = {**data["parallel"], "pp": pp, "dp": 16 // pp}
    data["training"].update({"offload": 8, "recompute": "none", **changes})
    with pytest.raises(InputError, match=pattern):
        cluster_from_dict(data)


def test_model_dependent_offload_checks():
    spec = load_model("llama3-8b")
    _, cl = _cluster("llama3-8b", "none")
    with pytest.raises(InputError, match=r"32 layers offloaded, llama3-8b has 32"):
        replace(cl, training=replace(cl.training, offload="layers:32")).check_against(spec)
    with pytest.raises(InputError, match=r"has no expert_fc1 module to offload"):
        replace(cl, training=replace(cl.training, offload="modules:expert_fc1")).check_against(spec)


def test_cli_offload_bad_value_and_target_are_one_line(ppplan, tmp_path):
    for argv, pattern in [(("--offload", "moe_fc9"), r"^error: --offload: unknown offload module"),
                          # the flag is named as given (the round-trip grid's o4), the file's field as written
                          (("--offload", "8", "--target", "torchtitan"),
                           r"^error: --offload: --target torchtitan does not offload.*drop --offload"),
                          (("--target", "torchtitan"), r"^error: training\.offload: --target torchtitan does not "
                                                       r"offload.*offload: none"),
                          # the grid's o9: --offload N under the default recompute auto names the flag and --recompute
                          (("--offload", "2", "--target", "megatron", "--recompute", "auto"),
                           r"^error: --offload: Megatron's --cpu-offloading does not run with recompute 'auto' "
                           r"\(pass --recompute none"),
                          # the grid's y7: a file's choice of modes with --gpus, refused before the cost model's line
                          (("--gpus", "16", "--target", "megatron"), r"^error: training\.offload: a choice of "
                                                                    r"offloading modes with --gpus")]:
        path = tmp_path / "c.yaml"
        data = yaml.safe_load(default_cluster_path("llama3-8b").read_text())
        data["parallel"] = {**data["parallel"], "pp": 1, "dp": 16}
        data["training"]["recompute"] = "none"
        if "--offload" not in argv:
            data["training"]["offload"] = ["none", 8] if "--gpus" in argv else 8
        path.write_text(yaml.safe_dump(data))
        got = ppplan("plan", "llama3-8b", "--cluster", str(path), *argv)
        assert got.code == 2, got.err
        lines = got.err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in got.err
        import re
        assert re.search(pattern, lines[0]), lines[0]


def _config(model: str, settings: dict, **kw):
    import torch

    spec = load_model(model)
    extra = dict(num_moe_experts=spec.moe.num_experts, moe_router_topk=spec.moe.top_k, moe_grouped_gemm=True,
                 expert_model_parallel_size=int(settings.get("expert_model_parallel_size", 1))) if spec.moe else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return config_mod.TransformerConfig(
            num_layers=spec.num_decoder_layers, hidden_size=spec.hidden, num_attention_heads=16,
            pipeline_dtype=torch.bfloat16, bf16=True,
            pipeline_model_parallel_size=int(settings["pipeline_model_parallel_size"]),
            recompute_granularity=settings.get("recompute_granularity"),
            recompute_modules=settings.get("recompute_modules"),
            cpu_offloading=settings["cpu_offloading"],
            cpu_offloading_num_layers=settings["cpu_offloading_num_layers"] or 0,
            fine_grained_activation_offloading=settings["fine_grained_activation_offloading"],
            offload_modules=settings["offload_modules"] or [], **extra, **kw)


def test_layer_offload_export_passes_megatron_core():
    _, cl = _cluster("llama3-8b", "none")
    p = api_plan("llama3-8b", cl, target="megatron", work=0.2, offload="24")
    m = megatron_args(p)
    assert m.args[m.args.index("--cpu-offloading-num-layers") + 1] == "24" and "--cpu-offloading" in m.args
    assert "--fine-grained-activation-offloading" not in m.args
    config = _config("llama3-8b", m.settings)
    assert config.cpu_offloading and config.cpu_offloading_num_layers == 24
    model = bridge_settings(p)["model"]
    assert model["cpu_offloading"] is True and model["cpu_offloading_num_layers"] == 24
    names = {f.name for f in dataclasses.fields(config_mod.TransformerConfig)}
    assert {"cpu_offloading", "cpu_offloading_num_layers", "fine_grained_activation_offloading",
            "offload_modules"} <= names
    with pytest.raises(ValueError, match="no support for Pipeline parallelism with CPU offloading"):
        _config("llama3-8b", {**m.settings, "pipeline_model_parallel_size": 2})  # the check is live


def test_fine_grained_export_passes_megatron_core():
    p = api_plan("qwen3-30b-a3b", target="megatron", work=0.2, offload="expert_fc1,moe_act")
    m = megatron_args(p)
    i = m.args.index("--offload-modules")
    assert m.args[i + 1:i + 3] == ["expert_fc1", "moe_act"] and "--fine-grained-activation-offloading" in m.args
    assert "--cpu-offloading" not in m.args
    config = _config("qwen3-30b-a3b", m.settings)
    assert config.fine_grained_activation_offloading and config.offload_modules == ["expert_fc1", "moe_act"]


def test_no_offload_exports_no_offload_flags():
    p = api_plan("llama3-8b", target="megatron", work=0.2)
    assert not any("offload" in a for a in megatron_args(p).args)
    assert "cpu_offloading" not in bridge_settings(p)["model"]


def test_a_choice_of_offload_modes_keeps_the_fastest_plan_that_fits():
    """``--offload`` repeated (or a list of modes in the file): each mode planned, the fastest that
    fits kept, every mode recorded; here no offloading does not fit at pp 1."""
    _, cl = _cluster("llama3-8b", "none")
    p = api_plan("llama3-8b", cl, target="megatron", work=0.2, offload=("none", "16", "24"))
    tried = p.solver.other["offload_modes"]
    assert [t["offload"] for t in tried] == ["none", "layers:16", "layers:24"]
    assert tried[0]["status"] == "infeasible"
    planned = [t for t in tried if t["status"] == "planned"]
    best = min(planned, key=lambda t: t["step_time_s"])
    assert p.cluster.settings.get("offload") == best["offload"]
    assert p.predicted.step_time_s == best["step_time_s"]


def test_a_choice_in_the_cluster_file_is_checked_and_read():
    data = yaml.safe_load(default_cluster_path("qwen3-30b-a3b").read_text())
    data["training"]["offload"] = ["none", ["expert_fc1", "moe_act"]]
    assert cluster_from_dict(data).training.offload == "none;modules:expert_fc1,moe_act"
    data["training"]["offload"] = ["none", ["expert_fc9"]]
    with pytest.raises(InputError, match=r"unknown offload module 'expert_fc9'"):
        cluster_from_dict(data)


def test_offload_with_the_degree_search_is_refused_in_one_line():
    with pytest.raises(InputError, match=r"--offload: given with --gpus"):
        api_plan("llama3-8b", gpus=16, offload="8", work=0.2)


def test_gpus_without_offload_still_plans(ppplan):
    """``--gpus`` with no ``--offload``: the CLI passes an empty tuple for the repeated option,
    which is not an offloading request (a merge once refused every ``--gpus`` plan this way)."""
    result = ppplan("plan", "llama3-8b", "--gpus", "8", "--quiet", "--out", "g.json")
    assert result.code == 0, result.err
