"""The torchtitan export loads the documented way, through torchtitan's own ``ConfigManager``.

torchtitan 0.3.0 (installed by .ci/run with --no-deps, plus the packages its config registries
import: triton, torchdata, tensorboard, datasets): ``ConfigManager().parse_args(["--module",
MODULE, "--config", "ppplan_config"])`` imports the exported module, calls the function, and
rebuilds the config with tyro, which runs ``Trainer.Config.__post_init__`` (the pipeline and
CUDA-graph checks). torchtitan main is not on the package index: its ``TrainingConfig``,
``ParallelismConfig`` and the pipeline checks of ``Trainer.Config`` are pinned in
``tests/fixtures/torchtitan_main`` (commit named there) and loaded through the same
``ConfigManager`` (``torchtitan/config/manager.py`` is identical in 0.3.0 and that commit).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from planner.api import plan as api_plan
from planner.core.hf_config import resolve_model_path
from planner.export import export_plan, write_export
from planner.export.pipelining import torch_csv
from planner.export.torchtitan import BASE_CONFIGS

manager = pytest.importorskip("torchtitan.config.manager", reason="torchtitan not installed (see .ci/run)")
pytest.importorskip("torchtitan.trainer", reason="torchtitan's trainer needs torchdata, tensorboard, datasets")
pytest.importorskip("triton", reason="torchtitan's model registries import triton (.ci/run)")

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _no_mtp_config(tmp_path: Path, model: str) -> str:
    """The model's config.json with its MTP layer switched off, in a folder named after the model."""
    cfg = json.loads(resolve_model_path(model).read_text())
    cfg["num_nextn_predict_layers"] = 0
    folder = tmp_path / model
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


def _export(plan, tmp_path: Path, module: str):
    out = export_plan(plan, "torchtitan", out=tmp_path / f"{module}.py")
    write_export(out)
    return out


def _load(monkeypatch, tmp_path: Path, module: str, config: str = "ppplan_config", extra: tuple[str, ...] = ()):
    monkeypatch.syspath_prepend(str(tmp_path))
    return manager.ConfigManager().parse_args(["--module", module, "--config", config, *extra])


def _read_back(config, form: dict) -> dict:
    return {section: {k: getattr(getattr(config, section), k) for k in values} for section, values in form.items()}


@pytest.mark.parametrize("model, vpp, recompute, ac", [
    ("llama3-8b", 1, "full", "FullAC"),
    ("llama3-8b", 2, "op", "SelectiveAC"),
    ("qwen3-30b-a3b", 2, "full", "FullAC"),
    ("qwen3-235b-a22b", 1, "none", None),
    ("deepseek-v3", 1, "full", "FullAC"),
])
def test_export_loads_with_torchtitan_0_3_config_manager(tmp_path, monkeypatch, model, vpp, recompute, ac):
    source = _no_mtp_config(tmp_path, model) if model == "deepseek-v3" else model
    plan = api_plan(source, target="torchtitan", vpp=vpp, recompute=recompute, work=2.0)
    module = f"tt_{model.replace('-', '_')}_{vpp}_{recompute}"  # one import name per case: Python caches modules
    out = _export(plan, tmp_path, module)
    config = _load(monkeypatch, tmp_path, module)
    want = out.summary["fields"]["0.3"]
    assert _read_back(config, want) == want
    assert config.training.disable_cuda_graphs is True
    assert type(config.activation_checkpoint).__qualname__ == (f"{ac}.Config" if ac else "NoneType")
    # torchtitan's own model of the plan: as many decoder layers as the plan partitions
    assert len(config.model_spec.model.layers) == plan.model["layout"].count("t")
    flavor = BASE_CONFIGS[model][2]
    assert flavor is None or config.model_spec.flavor == flavor
    assert Path(config.parallelism.pipeline_parallel_schedule_csv).read_text() == torch_csv(plan, fmt="torchtitan")


def test_export_loads_with_torchtitan_main_field_names(tmp_path, monkeypatch):
    plan = api_plan("qwen3-30b-a3b", target="torchtitan", vpp=2, recompute="full", work=2.0)
    out = _export(plan, tmp_path, "tt_plan_main")
    (tmp_path / "tt_main_probe.py").write_text(
        "from torchtitan_main.trainer_config import Config\nfrom tt_plan_main import apply_plan\n\n\n"
        "def main_config():\n    return apply_plan(Config())\n")
    monkeypatch.syspath_prepend(str(FIXTURES))
    config = _load(monkeypatch, tmp_path, "tt_main_probe", "main_config")
    want = out.summary["fields"]["main"]
    assert _read_back(config, want) == want
    size = plan.microbatches["size"]
    assert config.parallelism.num_pp_microbatches == plan.num_microbatches
    assert config.training.num_tokens_per_microbatch_per_dp_rank == size * plan.cluster.settings.seq_len
    assert type(config.activation_checkpoint).__qualname__ == "FullAC.Config"


def test_main_fixture_refuses_the_0_3_names(tmp_path, monkeypatch):
    """The pinned classes use slots=True: setting a 0.3 name fails, as it does on torchtitan main."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    from torchtitan_main.configs import ParallelismConfig, TrainingConfig

    with pytest.raises(AttributeError):
        ParallelismConfig().pipeline_parallel_microbatch_size = 1
    with pytest.raises(AttributeError):
        TrainingConfig().local_batch_size = 8
    assert {"num_pp_microbatches"} <= {f.name for f in dataclasses.fields(ParallelismConfig)}


def test_main_form_without_a_sequence_length_counts_tokens_of_the_base_config(tmp_path, monkeypatch):
    plan = copy.deepcopy(api_plan("llama3-8b", target="torchtitan", work=2.0))
    plan.cluster = dataclasses.replace(plan.cluster, training=plan.cluster.settings.without("seq_len"))
    _export(plan, tmp_path, "tt_no_seq")
    (tmp_path / "tt_no_seq_probe.py").write_text(
        "from torchtitan_main.trainer_config import Config\nfrom tt_no_seq import apply_plan\n\n\n"
        "def main_config():\n    return apply_plan(Config())\n")
    monkeypatch.syspath_prepend(str(FIXTURES))
    config = _load(monkeypatch, tmp_path, "tt_no_seq_probe", "main_config")
    assert config.training.max_context_length == 2048  # main's default
    assert config.training.num_tokens_per_microbatch_per_dp_rank == plan.microbatches["size"] * 2048


def test_command_line_overrides_parse_in_torchtitan(tmp_path, monkeypatch):
    """The printed scalar overrides, on torchtitan's own llama3_8b config, through its CLI parser."""
    plan = api_plan("llama3-8b", target="torchtitan", work=2.0)
    out = _export(plan, tmp_path, "tt_overrides")
    config = _load(monkeypatch, tmp_path, "llama3", "llama3_8b", tuple(out.summary["overrides"]["0.3"]))
    want = {s: {k: v for k, v in values.items() if not isinstance(v, list)}
            for s, values in out.summary["fields"]["0.3"].items()}
    assert _read_back(config, want) == want

