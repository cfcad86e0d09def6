"""Plan -> torchtitan Python config module (``--module PATH --config ppplan_config``).

torchtitan 0.3 and main configure a job with a Python function returning ``Trainer.Config``
(``torchtitan/config/manager.py``, the same file in both: ``--module`` names a module or a
fully qualified path, ``--config`` a function in it; ``tyro.cli`` then rebuilds the config,
which runs ``Trainer.Config.__post_init__``). The export writes such a module:
``apply_plan(config)`` sets the plan's ``parallelism`` and ``training`` fields and its
activation checkpointing (``torchtitan/distributed/activation_checkpoint.py``: ``SelectiveAC``,
``FullAC``, or None for none); ``ppplan_config()`` applies it to torchtitan's own config of the
model where torchtitan ships one. The schedule itself is the compute-only CSV beside it.

[Note: torchtitan field names] The two generations name the batch fields differently
(``torchtitan/config/configs.py``):

- 0.3.0: ``parallelism.pipeline_parallel_microbatch_size`` (sequences per microbatch),
  ``training.local_batch_size`` (sequences per data-parallel rank and step), ``training.seq_len``.
- main (pytorch/torchtitan ``b5bcd76c66d0acb1a08b176d9639425bc55e0b2a``):
  ``parallelism.num_pp_microbatches`` (microbatches per step),
  ``training.num_tokens_per_microbatch_per_dp_rank`` (microbatch size x sequence length),
  ``training.max_context_length``; the dataclasses use ``slots=True``, so an old name cannot
  even be set.

The module carries both forms and picks the one whose names the installed
``ParallelismConfig`` has. Both set ``training.disable_cuda_graphs``: ``Trainer.Config.
_validate_cuda_graphs`` (``torchtitan/trainer.py``) refuses pipeline parallelism otherwise.
"""

from __future__ import annotations

import pprint
from typing import Any

from planner.core.plan import Plan
from planner.core.op_sac import OP
from planner.core.recompute import is_module_set, modules_of
from planner.export.schedule import ExportError
from planner.export.pipelining import torchtitan_options

__all__ = ["torchtitan_config_py", "torchtitan_fields", "cli_overrides", "activation_checkpoint", "BASE_CONFIGS",
           "FIELD_FORMS"]

BASE_CONFIGS: dict[str, tuple[str, str, str | None]] = {
    "llama3-8b": ("llama3", "llama3_8b", None),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b", None),
    "qwen3-235b-a22b": ("qwen3", "qwen3_30b_a3b", "235B-A22B"),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b", None),
}
"""ppplan model -> (torchtitan model package, ``config_registry`` function, model flavor to put
in its ``model_spec`` or None to keep the function's). torchtitan 0.3.0 and main register these
functions and flavors (``torchtitan/models/<pkg>/config_registry.py`` and ``__init__.py``);
Qwen3-235B-A22B has a flavor but no config function, so the 30B-A3B recipe is used with the
235B flavor. ``deepseek_v3_671b`` builds DeepSeek-V3 without its MTP layer (``num_mtp_layers``
0): torchtitan runs MTP only without pipeline parallelism (``models/deepseek_v3/mtp.py``,
"MTP does not support pipeline parallelism yet"), so a DeepSeek-V3 plan for torchtitan is
made from the model's config with ``num_nextn_predict_layers: 0``."""

FIELD_FORMS = ("0.3", "main")
"""torchtitan field-name generations the module carries (see [Note: torchtitan field names])."""

_AC = {OP: "SelectiveAC", "full": "FullAC", "none": None}
"""ppplan's modes torchtitan runs: its ``SelectiveAC`` is the per-op policy (``planner.core.op_sac``)."""

_MODULE = '''"""torchtitan config from ppplan plan {name!r}: {stages} stages on {pp} pipeline ranks,
schedule {schedule} read from {csv!r}, activation checkpointing {ac}.

Run: torchrun ... -m torchtitan.train --module <this module's import path> --config ppplan_config
{base_note}
Works with torchtitan 0.3 and main: ``apply_plan`` uses the field names of the installed version.
"""

import dataclasses

from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

STAGE_MODULES = [
{stages_src}
]
"""Module FQNs of each pipeline stage (``parallelism.module_fqns_per_model_part``)."""

FIELDS = {fields}
"""Per torchtitan generation ("0.3", "main"): ``ParallelismConfig`` / ``TrainingConfig`` fields."""

MICROBATCH_SIZE = {size}
"""Sequences per pipeline microbatch."""

ACTIVATION_CHECKPOINT = {ac!r}
"""The plan's recomputation: SelectiveAC, FullAC or None (no recomputation)."""


def field_form(config):
    """The installed torchtitan's field names: "main" when ``ParallelismConfig`` has ``num_pp_microbatches``."""
    names = {{f.name for f in dataclasses.fields(config.parallelism)}}
    return "main" if "num_pp_microbatches" in names else "0.3"


def apply_plan(config):
    """The plan's pipeline, batch and activation checkpointing on a ``Trainer.Config``."""
    form = field_form(config)
    for section, values in FIELDS[form].items():
        for key, value in values.items():
            setattr(getattr(config, section), key, value)
    if form == "main" and "max_context_length" not in FIELDS[form]["training"]:
        # the plan has no sequence length: main counts a microbatch in tokens of the base config's
        config.training.num_tokens_per_microbatch_per_dp_rank = MICROBATCH_SIZE * config.training.max_context_length
    ac = {{"SelectiveAC": SelectiveAC, "FullAC": FullAC}}.get(ACTIVATION_CHECKPOINT)
    config.activation_checkpoint = ac.Config() if ac is not None else None
    return config
{base_fn}'''

_BASE_FN = '''

def ppplan_config():
    """torchtitan's own ``{fn}`` config{flavor_note} with the plan applied."""
    from torchtitan.models.{pkg}.config_registry import {fn}

    config = {fn}(){flavor_line}
    return apply_plan(config)
'''

_FLAVOR_LINE = '''
    from torchtitan.models.{pkg} import model_registry

    config.model_spec = model_registry({flavor!r})'''


def activation_checkpoint(plan: Plan) -> str | None:
    """torchtitan's activation-checkpoint class for the plan's recomputation mode. A Megatron
    module list and Megatron's selective mode (the attention core) have none: torchtitan's
    ``SelectiveAC`` keeps every second matmul's output instead, which the plan's ``op`` costs."""
    mode = plan.cluster.settings.recompute or "none"
    if is_module_set(mode):
        raise ExportError("torchtitan", f"the plan recomputes Megatron's modules {', '.join(modules_of(mode))}, "
                          "which torchtitan's activation checkpointing cannot name",
                          "export --format megatron, or plan with --recompute op, full or none")
    if mode == "selective":
        raise ExportError("torchtitan", f"the plan recomputes {mode} (the attention core, Megatron's selective), "
                          "which torchtitan's SelectiveAC does not run: it recomputes every second matmul",
                          "plan with --recompute op (torchtitan's per-op policy), full or none")
    return _AC.get(mode)


def torchtitan_fields(plan: Plan, *, csv_path: str) -> dict[str, dict[str, dict[str, Any]]]:
    """{form: {"parallelism": fields, "training": fields}} for each of ``FIELD_FORMS``.

    Built from the plan's microbatch size and count and sequence length; the schedule, stage
    FQNs and parallel degrees are ``torchtitan_options`` (the same in both forms).
    """
    options = torchtitan_options(plan, csv_path=csv_path)
    size, count = int(plan.microbatches.size), plan.num_microbatches
    seq = plan.cluster.settings.seq_len
    shared = {k: v for k, v in options["parallelism"].items() if k != "pipeline_parallel_microbatch_size"}
    old_training: dict[str, Any] = {"local_batch_size": count * size, "disable_cuda_graphs": True}
    new_training: dict[str, Any] = {"disable_cuda_graphs": True}
    if seq:
        old_training["seq_len"] = int(seq)
        new_training.update(num_tokens_per_microbatch_per_dp_rank=size * int(seq), max_context_length=int(seq))
    return {"0.3": {"parallelism": {**shared, "pipeline_parallel_microbatch_size": size}, "training": old_training},
            "main": {"parallelism": {**shared, "num_pp_microbatches": count}, "training": new_training}}


def cli_overrides(form: dict[str, dict[str, Any]]) -> list[str]:
    """torchtitan command-line overrides (``--section.key value``) of one form's scalar fields.

    tyro (``torchtitan/config/manager.py``) takes a true bool as a bare flag; list fields (the
    stage FQNs) exist only in the config module.
    """
    out: list[str] = []
    for section, values in form.items():
        for key, value in values.items():
            if value is True:
                out.append(f"--{section}.{key}")
            elif not isinstance(value, list):
                out += [f"--{section}.{key}", str(value)]
    return out


def torchtitan_config_py(plan: Plan, *, csv_path: str) -> str:
    """Python source of the config module (the CSV is ``torch_csv(plan)`` at ``csv_path``)."""
    fields = torchtitan_fields(plan, csv_path=csv_path)
    name = str(plan.model.name)
    base = BASE_CONFIGS.get(name)
    if base:
        pkg, fn, flavor = base
        base_note = f"Base config: torchtitan.models.{pkg}.config_registry.{fn}" + (
            f" with model flavor {flavor!r}" if flavor else "") + " (ppplan_config())."
        base_fn = _BASE_FN.format(pkg=pkg, fn=fn, flavor_note=f" with the {flavor} model" if flavor else "",
                                  flavor_line=_FLAVOR_LINE.format(pkg=pkg, flavor=flavor) if flavor else "")
    else:
        base_note = "torchtitan ships no config of this model: call apply_plan(your Trainer.Config)."
        base_fn = ""
    stages = fields["0.3"]["parallelism"]["module_fqns_per_model_part"]
    for form in fields.values():
        form["parallelism"]["module_fqns_per_model_part"] = _Name("STAGE_MODULES")
    return _MODULE.format(
        name=name, stages=plan.num_stages, pp=plan.pp, csv=csv_path,
        schedule=fields["0.3"]["parallelism"]["pipeline_parallel_schedule"], ac=activation_checkpoint(plan),
        size=int(plan.microbatches.size), base_note=base_note, base_fn=base_fn,
        stages_src="\n".join(f"    {part!r},  # stage {s}" for s, part in enumerate(stages)),
        fields=pprint.pformat(fields, width=100, sort_dicts=False))


class _Name:
    """A name written as itself in generated source (``repr`` is the bare name)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name
