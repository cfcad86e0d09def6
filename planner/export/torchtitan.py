"""Plan -> torchtitan 0.3 Python config module (``--module PATH --config ppplan_config``).

torchtitan 0.3 configures a job with a Python function returning ``Trainer.Config``
(``torchtitan/config/manager.py``: ``--module`` names a module, or a fully qualified path,
``--config`` a function in it). The export writes such a module: ``apply_plan(config)``
sets the plan's ``parallelism`` and ``training`` fields (``torchtitan/config/configs.py``
``ParallelismConfig``, ``TrainingConfig``: ``pipeline_parallel_schedule_csv``,
``module_fqns_per_model_part`` with ``lm_head`` as the output head,
``pipeline_parallel_microbatch_size``, ``local_batch_size``, ``seq_len``) and the plan's
activation checkpointing (``torchtitan/distributed/activation_checkpoint.py``:
``SelectiveAC``, ``FullAC``, or None for none); ``ppplan_config()`` applies it to
torchtitan's own config of the model where torchtitan ships one. The schedule itself is
the compute-only CSV beside it.
"""

from __future__ import annotations

import pprint

from planner.core.plan import Plan
from planner.export.pipelining import torchtitan_options

__all__ = ["torchtitan_config_py", "activation_checkpoint", "BASE_CONFIGS"]

BASE_CONFIGS = {"llama3-8b": ("llama3", "llama3_8b"), "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b")}
"""ppplan model -> (torchtitan model package, config_registry function) in torchtitan 0.3.0."""

_AC = {"selective": "SelectiveAC", "full": "FullAC", "none": None}

_MODULE = '''"""torchtitan 0.3 config from ppplan plan {name!r}: {stages} stages on {pp} pipeline ranks,
schedule {schedule} read from {csv!r}, activation checkpointing {ac}.

Run: torchrun ... -m torchtitan.train --module <this module's import path> --config ppplan_config
{base_note}
"""

from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

PARALLELISM = {parallelism}
"""``ParallelismConfig`` fields the plan sets."""

TRAINING = {training}
"""``TrainingConfig`` fields the plan sets."""

ACTIVATION_CHECKPOINT = {ac!r}
"""The plan's recomputation: SelectiveAC, FullAC or None (no recomputation)."""


def apply_plan(config):
    """The plan's pipeline, batch and activation checkpointing on a ``Trainer.Config``."""
    for key, value in PARALLELISM.items():
        setattr(config.parallelism, key, value)
    for key, value in TRAINING.items():
        setattr(config.training, key, value)
    ac = {{"SelectiveAC": SelectiveAC, "FullAC": FullAC}}.get(ACTIVATION_CHECKPOINT)
    config.activation_checkpoint = ac.Config() if ac is not None else None
    return config
{base_fn}'''

_BASE_FN = '''

def ppplan_config():
    """torchtitan's own ``{fn}`` config with the plan applied."""
    from torchtitan.models.{pkg}.config_registry import {fn}

    return apply_plan({fn}())
'''


def activation_checkpoint(plan: Plan) -> str | None:
    """torchtitan's activation-checkpoint class for the plan's recomputation mode."""
    return _AC.get(plan.cluster.get("training", {}).get("recompute") or "none")


def torchtitan_config_py(plan: Plan, *, csv_path: str) -> str:
    """Python source of the config module (the CSV is ``torch_csv(plan)`` at ``csv_path``)."""
    options = torchtitan_options(plan, csv_path=csv_path)
    name = str(plan.model.get("name", ""))
    base = BASE_CONFIGS.get(name)
    base_note = (f"Base config: torchtitan.models.{base[0]}.config_registry.{base[1]} (ppplan_config())."
                 if base else "torchtitan ships no config of this model: call apply_plan(your Trainer.Config).")
    return _MODULE.format(
        name=name, stages=plan.num_stages, pp=plan.pp, csv=csv_path,
        schedule=options["parallelism"]["pipeline_parallel_schedule"], ac=activation_checkpoint(plan),
        base_note=base_note, parallelism=pprint.pformat(options["parallelism"], width=100, sort_dicts=False),
        training=pprint.pformat(options["training"], width=100, sort_dicts=False),
        base_fn=_BASE_FN.format(pkg=base[0], fn=base[1]) if base else "")
