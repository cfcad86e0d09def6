"""Analytical profiler: roofline cost tables for the shipped models, and the overlap DAG."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.core.cluster import default_cluster_path, load_cluster
from planner.core.costs_io import load_costs
from planner.core.hf_config import load_model
from planner.core.paths import SHIPPED_MODELS
from profiler.analytical import analytical_costs
from profiler.overlap_dag import LayerTasks, overlapped_time


def _setup(model: str, **training):
    spec = load_model(model)
    cluster = load_cluster(default_cluster_path(model))
    if training:
        cluster = dataclasses.replace(cluster, training=dataclasses.replace(cluster.training, **training))
    return spec, cluster


@pytest.fixture(scope="module", params=SHIPPED_MODELS)
def table_and_spec(request):
    spec, cluster = _setup(request.param)
    return analytical_costs(spec, cluster), spec


def test_one_entry_per_layer_with_type_and_role(table_and_spec):
    table, spec = table_and_spec
    assert table.num_layers == spec.num_layers
    assert [lc.type for lc in table.layers] == [layer.type_key for layer in spec.layers]
    assert [lc.role for lc in table.layers] == [layer.role for layer in spec.layers]
    assert table.source == "analytical" and table.model == spec.name


def test_costs_are_physical(table_and_spec):
    table, spec = table_and_spec
    for lc, layer in zip(table.layers, spec.layers):
        assert min(lc.f, lc.i, lc.w, lc.a2a_f, lc.a2a_b) >= 0
        assert 0 <= lc.act_w_bytes <= lc.act_bytes
        assert lc.static_bytes > 0 and lc.out_bytes > 0
        if layer.role == "decoder":
            assert lc.f > 0 and lc.i > 0 and lc.w > 0 and lc.flops > 0
        if not layer.is_moe:
            assert lc.a2a_f == lc.a2a_b == 0.0


def test_moe_layers_pay_all_to_all_when_ep_above_one(table_and_spec):
    table, spec = table_and_spec
    moe = [lc for lc, layer in zip(table.layers, spec.layers) if layer.is_moe]
    if table.meta["parallel"]["ep"] > 1:
        assert moe and all(lc.a2a_f > 0 and lc.a2a_b > 0 for lc in moe)


def test_pair_costs_between_max_and_serial(table_and_spec):
    table, spec = table_and_spec
    first = {lc.type: k for k, lc in reversed(list(enumerate(table.layers)))}
    for (ta, tb), ov in table.pairs.items():
        a, b = first[ta], first[tb]
        serial = table.serial_pair(a, b)
        la, lb = table.layers[a], table.layers[b]
        assert ov <= serial * (1 + 1e-9)
        # one compute stream does both computes, one communication stream both all-to-alls
        assert ov >= max(la.f + lb.i, la.a2a_f + lb.a2a_b) * (1 - 1e-9)
        if table.layers[a].a2a_f == table.layers[b].a2a_b == 0:
            assert ov == pytest.approx(serial, rel=1e-9)  # nothing to hide


def test_moe_pairs_hide_some_communication():
    spec, cluster = _setup("qwen3-30b-a3b")
    table = analytical_costs(spec, cluster)
    k = spec.type_keys().index("gqa+moe")
    hidden = 1 - table.ov(k, k) / table.serial_pair(k, k)
    assert 0.05 < hidden < 0.6


def test_size_curve_is_per_microbatch_efficiency():
    spec, cluster = _setup("llama3-8b")
    table = analytical_costs(spec, cluster)
    curve = dict(table.size_curve)
    assert curve[1] == 1.0
    sizes = sorted(curve)
    assert all(curve[a] < curve[b] for a, b in zip(sizes, sizes[1:]))  # bigger takes longer
    assert all(curve[b] / b <= curve[a] / a * (1 + 1e-9) for a, b in zip(sizes, sizes[1:]))  # not per sequence


def test_recomputation_trades_memory_for_backward_time():
    none = analytical_costs(*_setup("qwen3-30b-a3b", recompute="none"))
    sel = analytical_costs(*_setup("qwen3-30b-a3b", recompute="selective"))
    full = analytical_costs(*_setup("qwen3-30b-a3b", recompute="full"))
    k = 1
    assert full.layers[k].act_bytes < sel.layers[k].act_bytes < none.layers[k].act_bytes
    assert full.layers[k].i > sel.layers[k].i > none.layers[k].i
    assert full.layers[k].f == none.layers[k].f
    # full recomputation re-runs the forward's dispatch and combine before the backward ones
    assert full.layers[k].a2a_b == pytest.approx(2 * none.layers[k].a2a_b)
    assert sel.layers[k].a2a_b == pytest.approx(none.layers[k].a2a_b) and none.layers[k].a2a_b > 0


def test_imbalance_gives_its_own_type_and_slows_the_layer():
    spec, cluster = _setup("qwen3-30b-a3b")
    factors = [1.0] * spec.num_layers
    factors[5] = 1.5
    table = analytical_costs(spec, cluster, imbalance=factors)
    assert table.layers[5].type == "gqa+moe@5" and table.layers[5].imbalance == 1.5
    assert table.layers[5].f > table.layers[4].f and table.layers[5].a2a_f > table.layers[4].a2a_f
    assert ("gqa+moe@5", "gqa+moe") in table.pairs


def test_profile_command_writes_the_analytical_table(ppplan, tmp_path):
    result = ppplan("profile", "qwen3-30b-a3b", "--analytical", "--out", "p.json")
    assert result.code == 0, result.err
    spec, cluster = _setup("qwen3-30b-a3b")
    assert load_costs(tmp_path / "p.json") == analytical_costs(spec, cluster)


# --- the overlap DAG --------------------------------------------------------------

DUR = st.floats(min_value=0.0, max_value=5.0, allow_nan=False)


@st.composite
def layer_tasks(draw) -> LayerTasks:
    return LayerTasks(**{f.name: draw(DUR) for f in dataclasses.fields(LayerTasks)})


def _work(f: LayerTasks, b: LayerTasks) -> tuple[float, float]:
    compute = f.attn_f + f.shared_f + f.mlp_f + b.attn_b + b.shared_b + b.mlp_b
    comm = f.dispatch_f + f.combine_f + b.dispatch_b + b.combine_b
    return compute, comm


@settings(max_examples=150, deadline=None, derandomize=True)
@given(layer_tasks(), layer_tasks(), st.floats(0.0, 1.0))
def test_overlapped_time_bounds(fwd, bwd, contention):
    compute, comm = _work(fwd, bwd)
    t = overlapped_time(fwd, bwd, contention=contention)
    assert t <= (fwd.forward + bwd.backward) * (1 + 1e-9) + 1e-12  # never worse than serial
    assert t >= max(compute, comm) * (1 - 1e-9) - 1e-12  # each stream does all its work


def test_no_communication_means_no_overlap():
    f = LayerTasks(attn_f=1.0, mlp_f=2.0)
    b = LayerTasks(attn_f=0.0, attn_b=1.5, mlp_b=2.5)
    assert overlapped_time(f, b) == pytest.approx(7.0)


def test_communication_hidden_behind_the_other_microbatch():
    # F: attn 1 -> dispatch 1 -> mlp 1 -> combine 1; B: combine 1 -> mlp 1 -> dispatch 1 -> attn 1.
    f = LayerTasks(attn_f=1.0, dispatch_f=1.0, mlp_f=1.0, combine_f=1.0)
    b = LayerTasks(attn_f=0.0, combine_b=1.0, mlp_b=1.0, dispatch_b=1.0, attn_b=1.0)
    free = overlapped_time(f, b, contention=0.0)
    assert free == pytest.approx(4.0)  # compute 4 = comm 4, fully interleaved
    assert 4.0 < overlapped_time(f, b, contention=0.2) < 8.0
