"""``--target torchtitan`` plans export a torchtitan 0.3 config torchtitan's own code accepts.

torchtitan 0.3.0 from the package index (``pip install --no-deps torchtitan==0.3.0`` plus
tyro and spmd-types, as .ci/run does): its ``ParallelismConfig`` / ``TrainingConfig``
dataclasses take the exported fields, its activation-checkpoint configs exist, and the
stage FQNs are the module names torchtitan's own LLM splitter
(``_generate_llm_fqn_per_model_part``) and decoder (``models/common/decoder.py``) use. Its
models cannot be built here (they import triton, a GPU compiler), so the decoder's
attribute names are read from its source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from planner.api import plan as api_plan
from planner.core.errors import InputError
from planner.export import export_plan
from planner.export.torchtitan import BASE_CONFIGS

pytest.importorskip("torchtitan.config", reason="torchtitan not installed (see .ci/run)")
pipeline_parallel = pytest.importorskip("torchtitan.distributed.pipeline_parallel",
                                        reason="torchtitan's pipeline module does not import here")


def _exec_config(source: str) -> dict:
    scope: dict = {}
    exec(compile(source, "torchtitan_config.py", "exec"), scope)  # the exported module, as written
    return scope


@pytest.mark.parametrize("model, recompute, ac", [("llama3-8b", "full", "FullAC"),
                                                  ("llama3-8b", "op", "SelectiveAC"),
                                                  ("qwen3-235b-a22b", "none", None)])
def test_torchtitan_config_fields_are_torchtitans(tmp_path, model, recompute, ac):
    from types import SimpleNamespace

    from torchtitan.config import ParallelismConfig, TrainingConfig

    plan = api_plan(model, target="torchtitan", recompute=recompute, work=2.0)
    assert plan.extra["target"] == "torchtitan"
    out = export_plan(plan, "torchtitan", out=tmp_path / "cfg.py")
    scope = _exec_config(out.files[str(tmp_path / "cfg.py")])
    ParallelismConfig(**scope["FIELDS"]["0.3"]["parallelism"])  # unknown or renamed fields raise TypeError
    TrainingConfig(**scope["FIELDS"]["0.3"]["training"])
    config = SimpleNamespace(parallelism=ParallelismConfig(), training=TrainingConfig(), activation_checkpoint=None)
    scope["apply_plan"](config)
    assert config.parallelism.pipeline_parallel_degree == plan.pp
    assert config.parallelism.pipeline_parallel_schedule_csv == str(tmp_path / "cfg.csv")
    assert type(config.activation_checkpoint).__qualname__ == (f"{ac}.Config" if ac else "NoneType")
    assert ("ppplan_config" in scope) == (model in BASE_CONFIGS)


def test_fqns_are_torchtitans_module_names(tmp_path):
    plan = api_plan("llama3-8b", target="torchtitan", vpp=2, work=2.0)
    fqns = export_plan(plan, "torchtitan", out=tmp_path / "cfg.py").summary["options"]["parallelism"][
        "module_fqns_per_model_part"]
    n_layers = plan.model["layout"].count("t")
    theirs = pipeline_parallel._generate_llm_fqn_per_model_part(plan.num_stages, n_layers)
    assert [n for part in fqns for n in part] == [n for part in theirs for n in part]
    import torchtitan

    # importing torchtitan.models pulls triton: read the decoder's source instead
    decoder = (Path(torchtitan.__file__).parent / "models" / "common" / "decoder.py").read_text()
    attrs = {t.attr for node in ast.walk(ast.parse(decoder)) if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Attribute)}
    assert {"tok_embeddings", "layers", "norm", "lm_head"} <= attrs


def test_mtp_models_are_refused_for_torchtitan_naming_the_targets():
    with pytest.raises(InputError, match=r"--target: torchtitan's models have no MTP module.*--target megatron"):
        api_plan("qwen3-next-80b-a3b", target="torchtitan")


def test_torchtitan_plans_have_no_fused_pairs():
    plan = api_plan("qwen3-30b-a3b", target="torchtitan", work=2.0)
    assert not any(a.startswith("(") for acts in plan.schedule.values() for a in acts)
