"""Plans out to the frameworks: ``ppplan export PLAN --format FMT`` and ``LaunchPlan``.

Formats (one module each): ``torch-csv`` (``pipelining``), ``torchtitan``
(``torchtitan``), ``megatron`` (``megatron``), ``megatron-bridge`` (``megatron_bridge``),
``deepspeed`` (``deepspeed``), ``trace`` (``trace``). Every exporter either writes
exactly the plan (partition, placement, microbatches, order) in the target's grammar or
raises ``ExportError`` naming what the target cannot express; none falls back to a
different schedule. All files of one export are rendered before any is written, and
each is written atomically.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from planner.core.outputs import write_files_atomic
from planner.core.plan import Plan
from planner.export.devices import device_note
from planner.export.schedule import ExportError

__all__ = ["FORMATS", "DEFAULT_OUT", "Export", "ExportError", "export_plan", "write_export",
           "LaunchPlan", "as_launch_plan"]

FORMATS = ("torch-csv", "torchtitan", "megatron", "megatron-bridge", "deepspeed", "trace")
DEFAULT_OUT = {"torch-csv": "schedule.csv", "torchtitan": "torchtitan_config.py",
               "megatron": "megatron_args.txt", "megatron-bridge": "megatron_bridge_overrides.yaml",
               "deepspeed": "deepspeed_pipeline.py", "trace": "trace.json"}
"""Output file per format when ``--out`` is not given."""


@dataclass(frozen=True, kw_only=True)
class Export:
    """One rendered export: file contents and a summary."""

    format: str
    """One of ``FORMATS``."""
    files: dict[str, str]
    """Path -> text to write (the first is the main output)."""
    summary: dict[str, Any]
    """What was exported, JSON-ready (``--json`` prints it)."""


def export_plan(plan: Plan, fmt: str, *, out: str | Path | None = None) -> Export:
    """Render ``plan`` in format ``fmt``; ``out`` names the main file (default ``DEFAULT_OUT``)."""
    if fmt not in FORMATS:
        raise ExportError(fmt, "unknown format", f"use one of {', '.join(FORMATS)}", replan=False)
    path = str(out if out is not None else DEFAULT_OUT[fmt])
    files, summary = _RENDER[fmt](plan, path)
    note = device_note(plan, fmt)
    return Export(format=fmt, files=files, summary={"format": fmt, "files": list(files), **summary,
                                                    **({"device_note": note} if note else {})})


def write_export(export: Export) -> None:
    """Write every file of ``export`` (temporary files, then renames: all or none)."""
    write_files_atomic(export.files)


def _torch_csv(plan: Plan, path: str) -> tuple[dict[str, str], dict[str, Any]]:
    from planner.export.pipelining import torch_csv

    text = torch_csv(plan)
    return {path: text}, {"ranks": plan.pp, "stages": plan.num_stages, "stage_ranks": plan.ranks(),
                          "microbatches": plan.num_microbatches}


def _torchtitan(plan: Plan, path: str) -> tuple[dict[str, str], dict[str, Any]]:
    from planner.export.pipelining import torch_csv, torchtitan_options
    from planner.export.torchtitan import activation_checkpoint, cli_overrides, torchtitan_config_py, torchtitan_fields

    csv_path = str(Path(path).with_suffix(".csv"))
    if csv_path == path:
        csv_path = path + ".csv"
    fields = torchtitan_fields(plan, csv_path=csv_path)
    module = torchtitan_config_py(plan, csv_path=csv_path)
    return ({path: module, csv_path: torch_csv(plan, fmt="torchtitan")},
            {"options": torchtitan_options(plan, csv_path=csv_path), "fields": fields,
             "overrides": {form: cli_overrides(values) for form, values in fields.items()},
             "activation_checkpoint": activation_checkpoint(plan)})


def _megatron(plan: Plan, path: str) -> tuple[dict[str, str], dict[str, Any]]:
    from planner.export.megatron import megatron_args

    m = megatron_args(plan)
    return {path: shlex.join(m.args) + "\n"}, {"args": m.args, "layout": m.layout,
                                               "alternative": m.alternative, "flags": m.flags,
                                               "env": m.env}


def _megatron_bridge(plan: Plan, path: str) -> tuple[dict[str, str], dict[str, Any]]:
    from planner.export.megatron_bridge import bridge_overrides_yaml, bridge_settings

    return {path: bridge_overrides_yaml(plan)}, {"settings": bridge_settings(plan)}


def _deepspeed(plan: Plan, path: str) -> tuple[dict[str, str], dict[str, Any]]:
    from planner.export.deepspeed import checkpoint_interval, deepspeed_parts, deepspeed_snippet

    return {path: deepspeed_snippet(plan)}, {"parts": deepspeed_parts(plan),
                                            "activation_checkpoint_interval": checkpoint_interval(plan)}


def _trace(plan: Plan, path: str) -> tuple[dict[str, str], dict[str, Any]]:
    from planner.export.schedule import check_exportable
    from planner.export.trace import chrome_trace

    check_exportable(plan, "trace")
    doc = chrome_trace(plan)
    return {path: json.dumps(doc) + "\n"}, {"events": len(doc["traceEvents"]),
                                           "step_time_s": doc["otherData"]["step_time_s"]}


_RENDER = {"torch-csv": _torch_csv, "torchtitan": _torchtitan, "megatron": _megatron,
           "megatron-bridge": _megatron_bridge, "deepspeed": _deepspeed, "trace": _trace}


class LaunchPlan(Plan):
    """A ``Plan`` with the views launchers need: framework arguments, CSV, JSON.

    ``stage_layers(rank)``, ``actions(rank)`` and ``to_json()`` come from ``Plan``.
    Methods raise ``ExportError`` when the framework cannot run the plan as planned.
    """

    @classmethod
    def of(cls, plan: Plan) -> "LaunchPlan":
        """The same plan as a ``LaunchPlan`` (fields shared, not copied)."""
        if isinstance(plan, cls):
            return plan
        return cls(**{f.name: getattr(plan, f.name) for f in fields(Plan)})

    @staticmethod
    def from_dict(data: Any, *, what: str = "plan") -> "LaunchPlan":
        """``Plan.from_dict`` returning a ``LaunchPlan``."""
        return LaunchPlan.of(Plan.from_dict(data, what=what))

    def megatron_args(self, *, layout: bool = True) -> list[str]:
        """Megatron-LM arguments; ``layout=False`` gives the decoder-first/last form (or raises)."""
        from planner.export.megatron import megatron_args

        m = megatron_args(self)
        if layout:
            return list(m.args)
        if m.alternative is None:
            raise ExportError("megatron", "the partition needs --pipeline-model-parallel-layout: "
                              "decoder-first/last counts cannot express it", "call megatron_args()", replan=False)
        return list(m.alternative)

    def torchtitan_options(self, *, csv_path: str = "schedule.csv") -> dict[str, dict[str, Any]]:
        """torchtitan ``parallelism``/``training`` options; write ``torch_csv()`` at ``csv_path``."""
        from planner.export.pipelining import torchtitan_options

        return torchtitan_options(self, csv_path=csv_path)

    def torch_csv(self) -> str:
        """Compute-only CSV for ``_PipelineScheduleRuntime._load_csv``."""
        from planner.export.pipelining import torch_csv

        return torch_csv(self)

    def deepspeed_parts(self) -> list[int]:
        """DeepSpeed ``PipelineModule`` boundaries (length stages + 1)."""
        from planner.export.deepspeed import deepspeed_parts

        return deepspeed_parts(self)

    def chrome_trace(self) -> dict[str, Any]:
        """Chrome/Perfetto trace of the predicted timeline."""
        from planner.export.trace import chrome_trace

        return chrome_trace(self)

    def export(self, fmt: str, out: str | Path | None = None) -> Export:
        """Render and write format ``fmt`` (see ``export_plan``)."""
        result = export_plan(self, fmt, out=out)
        write_export(result)
        return result


def as_launch_plan(result: Any) -> Any:
    """``LaunchPlan`` for a ``Plan``; in a tuple, list or dataclass (e.g. ``ReplanResult``)
    its ``Plan`` members become ``LaunchPlan``s; anything else is returned as is."""
    if isinstance(result, Plan):
        return LaunchPlan.of(result)
    if isinstance(result, (tuple, list)):
        return type(result)(as_launch_plan(x) for x in result)
    if is_dataclass(result) and not isinstance(result, type):
        changes = {f.name: LaunchPlan.of(getattr(result, f.name)) for f in fields(result)
                   if isinstance(getattr(result, f.name), Plan)}
        return replace(result, **changes) if changes else result
    return result
