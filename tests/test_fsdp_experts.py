"""``training.param_dtype`` and ``training.fsdp_experts``: NeMo AutoModel's BF16 parameters and
its MoE parallelizer's expert sharding, checked on load and counted by the one memory rule
(``profiler.analytical.state_bytes``)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from planner.api import plan
from planner.core.cluster import cluster_from_dict
from planner.core.errors import InfeasibleError, InputError
from planner.core.layer_math import ParamCount
from pathlib import Path
from profiler.analytical import state_bytes
from profiler.cost_model.optimizer import dp_step_cost

BASE = {
    "gpu": "h100", "num_gpus": 256, "gpus_per_node": 8,
    "parallel": {"pp": 4, "vpp": 1, "tp": 1, "ep": 64, "dp": 64},
    "training": {"global_batch": 512, "seq_len": 4096, "micro_batch_size": 1, "fsdp": True},
}
ROW = Path(__file__).resolve().parents[1] / "benchmarks/data/clusters/automodel-20251008-h100-qwen3-30b-a3b-8gpu.yaml"


def _cluster(**training):
    data = copy.deepcopy(BASE)
    data["training"].update(training)
    return cluster_from_dict(data)


@pytest.mark.parametrize("training,message", [
    ({"param_dtype": "fp16"}, r"training\.param_dtype: unknown 'fp16'.*fp32, bf16"),
    ({"fsdp_experts": "efsdp"}, r"training\.fsdp_experts: unknown 'efsdp'.*shard, ep_shard"),
    ({"fsdp_experts": "ep_shard", "fsdp": False}, r"training\.fsdp_experts: 'ep_shard' needs FSDP"),
    ({"grad_reduce_in_fp32": "no"}, r"training\.grad_reduce_in_fp32: expected bool"),
])
def test_bad_values_name_the_field(training, message):
    with pytest.raises(InputError, match=message):
        _cluster(**training)


def test_a_bad_value_in_a_file_exits_2_in_one_line(ppplan, tmp_path):
    data = copy.deepcopy(BASE)
    data["training"]["param_dtype"] = "half"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    res = ppplan("plan", "qwen3-30b-a3b", "--cluster", "c.yaml", "--target", "torch")
    assert res.code == 2
    assert res.err.strip().count("\n") == 0 and "training.param_dtype" in res.err and "Traceback" not in res.err


def test_defaults_keep_megatron_accounting():
    # 18 bytes per expert parameter over an expert-data-parallel group of 1, plus the 6 bytes a
    # pipeline's FSDP holds gathered: the accounting every shipped plan was made with
    p = ParamCount(dense=64_000, expert=6_400_000, activated=0)
    w, g, o = state_bytes(p, _cluster())
    expert = 6_400_000 / 64
    dense = 64_000 / 64
    assert (w, g, o) == pytest.approx((dense * 2 + (64_000 + expert) * 2 + expert * 2,
                                       dense * 4 + (64_000 + expert) * 4 + expert * 4,
                                       dense * 12 + expert * 12))


def test_automodel_keeps_8_bytes_per_expert_parameter_and_no_gathered_copy():
    p = ParamCount(dense=0, expert=6_400_000, activated=0)
    expert = 6_400_000 / 64
    w, g, o = state_bytes(p, _cluster(param_dtype="bf16", fsdp_experts="ep_shard"))
    assert (w, g, o) == pytest.approx((expert * 2, expert * 2, expert * 4))
    # on an ep_shard mesh of more than one rank AutoModel does fully_shard the experts: the
    # pipeline then holds their gathered weights and FP32 gradients as for any FSDP unit
    data = copy.deepcopy(BASE)
    data["parallel"] = {"pp": 4, "vpp": 1, "tp": 1, "ep": 16, "dp": 64}
    data["training"].update(param_dtype="bf16", fsdp_experts="ep_shard")
    w, g, o = state_bytes(p, cluster_from_dict(data))
    local = 6_400_000 / 16
    assert (w, g, o) == pytest.approx((local / 4 * 2 + local * 2, local / 4 * 2 + local * 4, local / 4 * 4))


def test_bf16_adam_moves_14_bytes_per_parameter():
    kw = dict(dense_params=1e9, expert_params=0.0, microbatch_compute_s=1.0, microbatches=1, layers=1)
    fp32 = dp_step_cost(_cluster(), **kw).optimizer_s
    bf16 = dp_step_cost(_cluster(param_dtype="bf16"), **kw).optimizer_s
    assert bf16 == pytest.approx(fp32 * 14 / 30)


def test_the_automodel_qwen3_row_fits_only_with_its_recipe(tmp_path):
    data = yaml.safe_load(ROW.read_text())
    assert data["training"]["param_dtype"] == "bf16" and data["training"]["fsdp_experts"] == "ep_shard"
    got = plan("qwen3-30b-a3b", cluster=str(ROW), target="torch", work=1)
    assert max(got.predicted["peak_memory_bytes"]) < 0.95 * 80e9
    for key in ("param_dtype", "fsdp_experts"):
        del data["training"][key]
    path = tmp_path / "megatron-accounting.yaml"
    path.write_text(json.dumps(data))
    with pytest.raises(InfeasibleError):
        plan("qwen3-30b-a3b", cluster=str(path), target="torch", work=1)


def test_bf16_gradient_buffer_halves_gradient_bytes_and_their_reduce_scatter():
    # Megatron-Bridge's Qwen3 recipes run ddp.grad_reduce_in_fp32 = False: 2 bytes of gradient
    p = ParamCount(dense=64_000, expert=6_400_000, activated=0)
    data = copy.deepcopy(BASE)
    data["training"].update(fsdp=False)
    fp32 = state_bytes(p, cluster_from_dict(data))
    data["training"]["grad_reduce_in_fp32"] = False
    bf16 = state_bytes(p, cluster_from_dict(data))
    assert bf16[0] == fp32[0] and bf16[2] == fp32[2] and bf16[1] == pytest.approx(fp32[1] / 2)
    kw = dict(dense_params=1e9, expert_params=0.0, microbatch_compute_s=0.0, microbatches=1, layers=1)
    data["training"]["grad_reduce_in_fp32"] = True
    comm32 = dp_step_cost(cluster_from_dict(data), **kw).comm_s
    data["training"]["grad_reduce_in_fp32"] = False
    comm16 = dp_step_cost(cluster_from_dict(data), **kw).comm_s
    assert comm16 == pytest.approx(comm32 * (2 + 2) / (4 + 2))  # reduce-scatter 4 -> 2 B, gather 2 B


def test_bf16_gradients_export_megatrons_flag_and_its_ddp_config_takes_it():
    from planner.export.megatron import megatron_args

    ddp_mod = pytest.importorskip("megatron.core.distributed.distributed_data_parallel_config")
    row = ROW.parent / "mb-25.09-h100-qwen3-30b-a3b-tokendrop-16gpu.yaml"
    args = megatron_args(plan("qwen3-30b-a3b", cluster=str(row), target="megatron", work=1)).args
    assert "--grad-reduce-in-bf16" in args
    # Megatron-LM validate_args: --grad-reduce-in-bf16 -> accumulate_allreduce_grads_in_fp32 False,
    # handed to megatron-core's DDP config as grad_reduce_in_fp32 (training.py get_model)
    cfg = ddp_mod.DistributedDataParallelConfig(grad_reduce_in_fp32="--grad-reduce-in-bf16" not in args,
                                                use_distributed_optimizer="--use-distributed-optimizer" in args)
    assert cfg.grad_reduce_in_fp32 is False and cfg.use_distributed_optimizer
    default = megatron_args(plan("qwen3-30b-a3b", target="megatron", work=1)).args
    assert "--grad-reduce-in-bf16" not in default
