"""Context parallelism per ring step: torch's ring attention against Megatron/TE's ring
(``profiler.cost_model.ring``), and ``training.cp_comm_type`` checked on load."""

from __future__ import annotations

import copy

import pytest

from planner.core.cluster import cluster_from_dict
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from profiler.analytical import analytical_costs
from profiler.cost_model.context import CostContext
from profiler.cost_model.fitted import FITTED
from profiler.cost_model.ring import MERGE_BYTES, cp_core_times

BASE = {"gpu": "h100", "num_gpus": 8, "gpus_per_node": 8,
        "parallel": {"pp": 1, "tp": 1, "cp": 8, "dp": 1},
        "training": {"global_batch": 1, "seq_len": 262144, "micro_batch_size": 1, "recompute": "none",
                     "attention_kernel": "flash2"}}


def _cluster(cp: int = 8, **training):
    data = copy.deepcopy(BASE)
    data["parallel"]["cp"], data["parallel"]["dp"] = cp, 8 // cp
    data["training"].update(training)
    if cp == 1:
        data["training"]["global_batch"] = 8
    return cluster_from_dict(data)


def _attn_layer(cluster):
    spec = load_model("llama3-8b")
    table = analytical_costs(spec, cluster, size_curve_sizes=())
    return table.layers[1]


def test_default_and_p2p_are_the_overlapped_ring_and_torch_ring_costs_more():
    auto, p2p = _attn_layer(_cluster()), _attn_layer(_cluster(cp_comm_type="p2p"))
    torch_ag = _attn_layer(_cluster(cp_comm_type="torch_allgather"))
    assert auto.f == pytest.approx(p2p.f) and auto.i == pytest.approx(p2p.i)
    assert torch_ag.f > auto.f * 1.02 and torch_ag.i > auto.i * 1.02
    assert torch_ag.w == pytest.approx(auto.w)  # the weight gradient has no ring


def test_without_cp_the_torch_ring_changes_nothing():
    assert _attn_layer(_cluster(1, cp_comm_type="torch_alltoall")).f == \
        pytest.approx(_attn_layer(_cluster(1)).f)


def test_each_ring_step_pays_its_fp32_merge():
    """Forward = the steps' attention + (cp - 1) merges (+ casts): at least the merges' bytes."""
    cluster = _cluster(cp_comm_type="torch_allgather")
    ctx = CostContext(model=load_model("llama3-8b"), cluster=cluster, tokens=262144 / 8, cal=FITTED)
    q = 4096
    t = cp_core_times(ctx, core_f=1.0, core_b=2.5, kv_elems=2 * 1024, q_elems=q, heads=32, head_dim=128)
    merges = 7 * ctx.mem(0.75 * ctx.tokens * q * MERGE_BYTES)
    assert t.fwd_s >= 1.0 + merges
    assert t.bwd_s > 2.5


def test_alltoall_rotation_exposes_a_send_longer_than_its_step():
    """A step's K/V send beyond the step's own attention is exposed every step (alltoall),
    once with allgather; tiny compute makes the sends show."""
    ctx = CostContext(model=load_model("llama3-8b"), cluster=_cluster(cp_comm_type="torch_alltoall"),
                      tokens=262144 / 8, cal=FITTED)
    tiny = cp_core_times(ctx, core_f=1e-9, core_b=1e-9, kv_elems=2048, q_elems=4096, heads=32, head_dim=128)
    kv_send = ctx.tokens * 2 * 32 * 128 * 2 / ctx.cluster.nvlink_bandwidth
    assert tiny.fwd_s >= 6 * kv_send


@pytest.mark.parametrize("value, message", [("a2a", "not modelled"), ("allgather", "not modelled"),
                                            ("ring", "unknown 'ring'")])
def test_cp_comm_type_refused_in_one_line(value, message):
    with pytest.raises(InputError, match=f"training.cp_comm_type.*{message}"):
        _cluster(cp_comm_type=value)
