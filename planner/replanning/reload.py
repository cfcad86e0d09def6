"""The ``migration`` section of a plan: per-layer moves, new local layer names, reload flags.

Written by ``ppplan replan --gpus`` and printed by ``ppplan diff``. Device lists are
compressed to ranges (``"0-7,16-23"``). Each new stage lists its layers as
``[global index, role, local index]``: Megatron numbers a chunk's decoder and MTP layers
from 0 in their own blocks (``megatron_layout.local_layers``), so a checkpoint saved under
one layout and loaded under another must map names through it. Megatron's dist-ckpt
(``--ckpt-format torch_dist``) reshards on load, but the pipeline layout comes from the
command line, not the checkpoint: ``reload`` gives the new plan's
``--pipeline-model-parallel-layout`` and arguments (``planner.export.megatron``), or why
Megatron cannot run it.
"""

from __future__ import annotations

from planner.core.model import ModelSpec
from planner.core.plan import Plan
from planner.export.megatron import megatron_args, megatron_layout
from planner.export.schedule import ExportError
from planner.replanning.megatron_layout import local_layers
from planner.replanning.migration import DeviceMigration

__all__ = ["migration_section", "device_ranges", "parse_ranges", "CKPT_FLAGS"]

CKPT_FLAGS = ["--ckpt-format", "torch_dist"]
"""Megatron's distributed checkpoint format, which reshards on load."""


def device_ranges(devices) -> str:
    """Sorted device ids as ``"0-7,16,18-19"`` ("" for none)."""
    out, run = [], []
    for d in sorted(set(devices)):
        if run and d == run[-1] + 1:
            run.append(d)
            continue
        if run:
            out.append(_run(run))
        run = [d]
    if run:
        out.append(_run(run))
    return ",".join(out)


def parse_ranges(text: str) -> list[int]:
    """The inverse of ``device_ranges``."""
    out = []
    for item in filter(None, text.split(",")):
        lo, _, hi = item.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def _run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def migration_section(model: ModelSpec, new: Plan, move: DeviceMigration, *, lost=(), idle=()) -> dict:
    """JSON form of ``move`` with the new plan's local layer names and reload flags."""
    layers = [{"layer": t.layer, "role": model.layers[t.layer].role, "type": model.layers[t.layer].type_key,
               "before": device_ranges(t.before), "after": device_ranges(t.after), "kept": device_ranges(t.kept),
               "sends": [list(p) for p in t.sends], "bytes_per_gpu": t.bytes_per_gpu,
               "optimizer_bytes_per_gpu": t.optimizer_bytes_per_gpu, "optimizer_lost": t.optimizer_lost}
              for t in move.layers]
    stages = [{"stage": s, "rank": r, "layers": list(b), "local": [list(x) for x in names]}
              for s, (b, r, names) in enumerate(zip(new.bounds(), new.ranks(), local_layers(model, new.bounds())))]
    return {"bytes_moved": move.bytes_moved, "link_bytes": dict(move.link_bytes), "seconds": move.seconds,
            "busiest_device": move.busiest_device, "bandwidth": dict(move.bandwidth),
            "lost": device_ranges(lost), "idle": device_ranges(idle), "rank_order": "tp-cp-ep-dp-pp",
            "layers": layers, "stages": stages, "reload": _reload(new)}


def _reload(new: Plan) -> dict:
    """Megatron flags that load the checkpoint into the new plan's layout."""
    try:
        layout = megatron_layout(new)
    except ExportError as exc:
        return {"layout": None, "args": None, "why": str(exc)}
    try:
        args = megatron_args(new).args
    except ExportError as exc:  # the layout is expressible, the schedule is not Megatron's
        return {"layout": layout, "args": [*CKPT_FLAGS, "--pipeline-model-parallel-layout", layout], "why": str(exc)}
    return {"layout": layout, "args": [*CKPT_FLAGS, *args], "why": ""}
