"""Planning for Megatron's MoE capacity mode (``training.moe_expert_capacity_factor``,
``training.moe_pad_expert_input_to_capacity``): the analytical costs cap the busiest rank's
expert load at the capacity (exactly it when padded), the plan records the mode, the
Megatron export carries its flags and the replay runs it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
import yaml

from planner.api import cluster_section, plan
from planner.core.cluster import cluster_from_dict, load_cluster
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.core.paths import CLUSTERS_DIR
from planner.export.megatron import megatron_args
from planner.replay.options import ReplayOptions
from profiler.analytical import analytical_costs

MODEL = "qwen3-30b-a3b"


def _cluster(**training):
    base = load_cluster(CLUSTERS_DIR / f"{MODEL}.yaml")
    return replace(base, training=replace(base.training, **training)).check()


def _moe_layer(table):
    return next(lc for lc in table.layers if "moe" in lc.type)


def test_capacity_caps_the_busiest_rank_and_padding_fixes_it():
    model = load_model(MODEL)
    skew = [1.4] * model.num_layers
    dropless = _moe_layer(analytical_costs(model, _cluster(), imbalance=skew))
    even = _moe_layer(analytical_costs(model, _cluster()))
    capped = _moe_layer(analytical_costs(model, _cluster(moe_expert_capacity_factor=1.0), imbalance=skew))
    padded = _moe_layer(analytical_costs(model, _cluster(moe_expert_capacity_factor=1.25,
                                                         moe_pad_expert_input_to_capacity=True)))
    loose = _moe_layer(analytical_costs(model, _cluster(moe_expert_capacity_factor=2.0), imbalance=skew))
    assert dropless.imbalance == 1.4 and capped.imbalance == 1.0 and padded.imbalance == 1.25
    assert capped.f == pytest.approx(even.f) and capped.a2a_f == pytest.approx(even.a2a_f)
    assert padded.f > even.f and padded.a2a_f > even.a2a_f       # padded buffers: work at capacity
    assert loose.f == pytest.approx(dropless.f)                   # a capacity above the load drops nothing


@pytest.mark.parametrize("training, field", [
    ({"moe_expert_capacity_factor": 0.0}, "training.moe_expert_capacity_factor"),
    ({"moe_expert_capacity_factor": float("inf")}, "training.moe_expert_capacity_factor"),
    ({"moe_pad_expert_input_to_capacity": True}, "training.moe_pad_expert_input_to_capacity"),
])
def test_bad_capacity_settings_name_the_field(training, field):
    data = yaml.safe_load((CLUSTERS_DIR / f"{MODEL}.yaml").read_text())
    data["training"].update(training)
    with pytest.raises(InputError) as err:
        cluster_from_dict(data)
    assert err.value.field == field


def test_cli_refuses_a_bad_capacity_in_a_cluster_file(tmp_path):
    data = yaml.safe_load((CLUSTERS_DIR / f"{MODEL}.yaml").read_text())
    data["training"]["moe_pad_expert_input_to_capacity"] = True
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    run = subprocess.run([sys.executable, "-m", "planner.cli", "plan", MODEL, "--cluster", str(tmp_path / "c.yaml"),
                          "--out", str(tmp_path / "p.json")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "training.moe_pad_expert_input_to_capacity" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "p.json").exists()


def test_plan_records_the_mode_only_when_set_and_exports_and_replays_it(tmp_path):
    assert "moe_expert_capacity_factor" not in cluster_section(_cluster())["training"]
    data = yaml.safe_load((CLUSTERS_DIR / f"{MODEL}.yaml").read_text())
    data["training"].update(moe_expert_capacity_factor=1.25, moe_pad_expert_input_to_capacity=True)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    p = plan(MODEL, cluster=tmp_path / "c.yaml", target="megatron", work=1.0)
    train = p.cluster.settings
    assert train["moe_expert_capacity_factor"] == 1.25 and train["moe_pad_expert_input_to_capacity"] is True
    args = megatron_args(p).args
    k = args.index("--moe-expert-capacity-factor")
    assert args[k + 1] == "1.25" and "--moe-pad-expert-input-to-capacity" in args
    mode = ReplayOptions().moe_capacity(p)                       # the replay runs the planned mode
    assert mode.factor == 1.25 and mode.pad
    assert ReplayOptions(moe_expert_capacity_factor=2.0).moe_capacity(p).factor == 2.0  # flags win


@pytest.mark.parametrize("target", ["torchtitan", "deepspeed"])
def test_targets_without_a_capacity_mode_refuse_it(tmp_path, target):
    data = yaml.safe_load((CLUSTERS_DIR / f"{MODEL}.yaml").read_text())
    data["training"].update(moe_expert_capacity_factor=1.25)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="does not run Megatron's MoE capacity mode") as err:
        plan(MODEL, cluster=tmp_path / "c.yaml", target=target, work=1.0)
    assert err.value.field == "training.moe_expert_capacity_factor"


def test_megatron_core_accepts_the_exported_capacity_flags(tmp_path):
    config_mod = pytest.importorskip("megatron.core.transformer.transformer_config",
                                     reason="megatron-core not installed (pip install -e '.[frameworks]')")
    import warnings

    from test_targets_megatron import _flags, _transformer_config

    data = yaml.safe_load((CLUSTERS_DIR / f"{MODEL}.yaml").read_text())
    data["training"].update(moe_expert_capacity_factor=1.25, moe_pad_expert_input_to_capacity=True)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    p = plan(MODEL, cluster=tmp_path / "c.yaml", target="megatron", work=1.0)
    flags = _flags(megatron_args(p).args)
    config = _transformer_config(MODEL, flags, p.num_stages // p.pp)  # Megatron-Core's own checks
    assert config.moe_expert_capacity_factor == 1.25 and config.moe_pad_expert_input_to_capacity
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="moe_expert_capacity_factor must be set"):
            config_mod.TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_moe_experts=4,
                                         moe_pad_expert_input_to_capacity=True)


def test_analytical_profile_takes_the_capacity_flags(tmp_path):
    out = tmp_path / "p.json"
    run = subprocess.run([sys.executable, "-m", "planner.cli", "profile", MODEL, "--analytical",
                          "--moe-expert-capacity-factor", "1.25", "--moe-pad-expert-input-to-capacity",
                          "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    from planner.core.costs_io import load_costs

    moe = [lc for lc in load_costs(out).layers if "moe" in lc.type]
    assert moe and {lc.imbalance for lc in moe} == {1.25}
