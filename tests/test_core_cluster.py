"""Cluster YAML loading and every check of ``ClusterSpec``."""

from __future__ import annotations

import copy

import pytest
import yaml

from planner.core.cluster import (
    ClusterSpec,
    cluster_from_dict,
    default_cluster_path,
    load_cluster,
)
from planner.core.errors import InputError
from planner.core.hardware import GPU_PRESETS
from planner.core.hf_config import load_model
from planner.core.paths import CLUSTERS_DIR, SHIPPED_MODELS

BASE = {
    "gpu": "h100",
    "num_gpus": 16,
    "gpus_per_node": 8,
    "parallel": {"pp": 4, "vpp": 1, "tp": 1, "ep": 4, "dp": 4},
    "training": {"global_batch": 64, "seq_len": 4096, "micro_batch_size": 1},
}


def _with(path: str, value) -> dict:
    """BASE with ``a.b`` set to value (or deleted when value is ...)."""
    data = copy.deepcopy(BASE)
    *head, last = path.split(".")
    node = data
    for key in head:
        node = node.setdefault(key, {})
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return data


@pytest.mark.parametrize("model", SHIPPED_MODELS)
def test_every_shipped_model_has_a_valid_default_cluster(model):
    path = default_cluster_path(model)
    assert path is not None and path.parent == CLUSTERS_DIR
    spec = load_cluster(path)
    spec.check_against(load_model(model))
    p = spec.parallel
    assert p.pp * p.tp * p.dp == spec.num_gpus
    assert spec.microbatches_per_step * p.dp * spec.training.micro_batch_size == spec.training.global_batch
    assert 0 < spec.memory_limit_bytes < spec.gpu.memory_bytes


def test_yaml_round_trip_values(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(BASE))
    spec = load_cluster(f)
    assert spec.gpu == GPU_PRESETS["h100"]
    assert (spec.parallel.pp, spec.parallel.ep, spec.parallel.dp) == (4, 4, 4)
    assert spec.microbatches_per_step == 16
    assert spec.memory_limit_bytes == int(80 * 2**30 * 0.9)


def test_gpu_preset_overrides():
    spec = cluster_from_dict(_with("gpu", {"preset": "h100", "memory_bytes": 40 * 2**30}))
    assert spec.gpu.memory_bytes == 40 * 2**30 and spec.gpu.peak_flops == GPU_PRESETS["h100"].peak_flops


@pytest.mark.parametrize("path, value, field", [
    ("num_gpus", 15, r"parallel: pp x tp x dp = 4x1x4 = 16 but num_gpus = 15"),
    ("parallel.pp", 0, r"parallel\.pp: must be >= 1"),
    ("parallel.ep", 3, r"parallel\.ep: ep 3 must divide dp x tp"),
    ("training.global_batch", 62, r"training\.global_batch: 62 is not divisible by dp x micro_batch_size"),
    ("training.precision", "fp4", r"training\.precision: unknown 'fp4'"),
    ("training.recompute", "some", r"training\.recompute: unknown 'some'"),
    ("training.memory_headroom", 1.5, r"training\.memory_headroom"),
    ("training.seq_len", 0, r"training: global_batch, seq_len and micro_batch_size must be >= 1"),
    ("training.global_batch", ..., r"cluster\.training\.global_batch: missing"),
    ("training.seq_len", "long", r"cluster\.training\.seq_len: expected int"),
    ("training.batch", 3, r"cluster\.training\.batch: unknown field"),
    ("parallel.cp", 2, r"parallel: pp x tp x cp x dp = 4x1x2x4 = 32 but num_gpus = 16 \(set dp to 2"),
    ("parallel.cp", 0, r"parallel\.cp: must be >= 1"),
    ("parallel.etp", 8, r"parallel\.ep: ep x etp = 4x8 must divide dp x cp x tp = 4"),
    ("parallel.zp", 2, r"cluster\.parallel\.zp: unknown field"),
    ("training.fsdp", "yes", r"cluster\.training\.fsdp: expected bool"),
    ("network", "ib", r"cluster\.network: expected a mapping"),
    ("network.dispatcher", "mpi", r"cluster\.network\.dispatcher: unknown 'mpi' \(use one of alltoall, deepep, hybridep\)"),
    ("network.network_gbps", -5, r"cluster\.network\.network_gbps: expected a positive number of GB/s"),
    ("network.nvlink_gbps", True, r"cluster\.network\.nvlink_gbps: expected a positive number"),
    ("network.fabric", "ib", r"cluster\.network\.fabric: unknown field"),
    ("parallel.pp", 2.5, r"cluster\.parallel\.pp: expected int"),
    ("parallel", [4, 1], r"cluster\.parallel: expected a mapping"),
    ("gpu", "tpu", r"cluster\.gpu: unknown GPU 'tpu'"),
    ("gpu", {"name": "mine", "peak_flops": 1e15}, r"cluster\.gpu\.\w+: missing for a custom GPU"),
    ("gpu", {"preset": "h100", "memory_bytes": -1}, r"cluster\.gpu\.memory_bytes: expected a positive number"),
    ("gpu", {"preset": "a100", "peak_flops": 0}, r"cluster\.gpu\.peak_flops: expected a positive number"),
    ("gpu", {"preset": "a100", "fp8_peak_flops": -1}, r"cluster\.gpu\.fp8_peak_flops: expected a positive number"),
    ("gpu", {"preset": "h100", "hbm": 1}, r"cluster\.gpu\.hbm: unknown field"),
    ("gpu", ..., r"cluster\.gpu: missing"),
    ("num_gpus", ..., r"cluster\.num_gpus: missing"),
    ("num_gpus", "sixteen", r"cluster\.num_gpus: expected a positive integer"),
    ("gpus_per_node", 0, r"cluster\.gpus_per_node: expected a positive integer"),
    ("training", ..., r"cluster\.training: missing"),
    ("nodes", 2, r"cluster\.nodes: unknown field"),
])
def test_each_check_names_its_field(path, value, field):
    with pytest.raises(InputError, match=field):
        cluster_from_dict(_with(path, value))


def test_not_a_mapping():
    with pytest.raises(InputError, match="cluster: expected a mapping"):
        cluster_from_dict([1, 2, 3])


def test_yaml_syntax_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu: h100\nparallel: {pp: 4\n")
    with pytest.raises(InputError, match=r"cluster file: .* is not valid YAML \(line \d+\)"):
        load_cluster(bad)
    with pytest.raises(InputError, match="cluster file: cannot read"):
        load_cluster(tmp_path / "nope.yaml")


def test_model_dependent_checks():
    spec = cluster_from_dict(BASE)
    llama = load_model("llama3-8b")  # 34 layers, dense
    too_many = spec.with_parallel(pp=16, vpp=4)
    with pytest.raises(InputError, match=r"parallel\.pp: 34 layers .* cannot fill pp x vpp = 64 stages"):
        too_many.check_against(llama)
    qwen = load_model("qwen3-30b-a3b")  # 128 experts
    bad_ep = cluster_from_dict(_with("parallel", {"pp": 1, "tp": 1, "ep": 3, "dp": 3}) | {"num_gpus": 3,
                               "training": {"global_batch": 3, "seq_len": 128}})
    with pytest.raises(InputError, match=r"parallel\.ep: ep 3 does not divide 128 experts"):
        bad_ep.check_against(qwen)
    assert spec.check_against(qwen) is spec


def test_with_parallel_recomputes_dp_and_keeps_ep_dividing():
    spec = cluster_from_dict(BASE)
    changed = spec.with_parallel(pp=8)
    assert (changed.parallel.pp, changed.parallel.dp) == (8, 2)
    assert (changed.parallel.dp * changed.parallel.tp) % changed.parallel.ep == 0
    assert isinstance(changed.check(), ClusterSpec)


def test_new_fields_are_read_and_used():
    data = _with("parallel", {"pp": 2, "tp": 2, "cp": 2, "ep": 4, "etp": 2, "dp": 2})
    data["num_gpus"], data["gpus_per_node"] = 16, 72
    data["training"]["fsdp"] = True
    data["network"] = {"dispatcher": "deepep", "network_gbps": 100, "description": "4x NDR"}
    spec = cluster_from_dict(data)
    assert (spec.parallel.cp, spec.parallel.etp, spec.training.fsdp) == (2, 2, True)
    assert spec.network.kind.dedup_per_node and spec.network_bandwidth == 100e9
    assert spec.nvlink_bandwidth == GPU_PRESETS["h100"].nvlink_bandwidth


def test_blackwell_presets_have_fp8_and_more_memory():
    for name in ("b200", "gb200"):
        gpu = GPU_PRESETS[name]
        assert gpu.fp8_peak_flops == 2 * gpu.peak_flops and gpu.memory_bytes > GPU_PRESETS["h200"].memory_bytes
