"""Plan -> DeepSpeed pipeline partition (``deepspeed/runtime/pipe/module.py``).

``PipelineModule`` cuts its layer list at ``parts`` (length stages + 1, stage s owns
layers ``[parts[s], parts[s + 1])``) and offers no argument for an explicit list, so the
export is a subclass overriding ``_partition_layers``. DeepSpeed holds one stage per
pipeline rank (stage s on rank s) and always runs its own 1F1B ``TrainSchedule`` with a
full backward: virtual stages, V placement, fused F&B pairs, moved W and orders other
than 1F1B are refused. Recomputation is ``activation_checkpoint_interval`` (whole layers:
full recomputation); a selectively recomputing plan is refused.
"""

from __future__ import annotations

from planner.core.plan import Plan
from planner.core.op_sac import OP
from planner.core.recompute import is_module_set
from planner.export.schedule import (ExportError, check_exportable, first_difference, has_fused,
                                     moved_w, placement_style)
from solvers.schedule.families.generators import one_f_one_b

__all__ = ["deepspeed_parts", "deepspeed_snippet", "checkpoint_interval"]

_FMT = "deepspeed"

_SNIPPET = '''"""DeepSpeed pipeline partition from ppplan plan {name!r}.

The module's layer list must hold one entry per plan layer, in plan order
({layout_note}).
Build it with ``num_stages=NUM_STAGES``, pass ``DEEPSPEED_CONFIG`` (with your optimizer settings)
to ``deepspeed.initialize``; ``engine.train_batch()`` then runs the plan's microbatches in
DeepSpeed's 1F1B.
"""

from deepspeed.pipe import PipelineModule

PARTS = {parts}
"""Stage s owns layers [PARTS[s], PARTS[s + 1])."""

NUM_STAGES = {pp}
"""Pipeline stages, one per pipeline rank."""

DEEPSPEED_CONFIG = {config}
"""The plan's microbatches: size per microbatch and count per step (one data-parallel replica)."""

ACTIVATION_CHECKPOINT_INTERVAL = {interval}
"""The plan's recomputation ({recompute}): 1 recomputes every layer's forward in the backward
(full recomputation), 0 keeps all activations."""


class PlannedPipelineModule(PipelineModule):
    """``PipelineModule`` with the plan's stage boundaries and activation checkpointing."""

    def __init__(self, layers, **kwargs):
        kwargs.setdefault("activation_checkpoint_interval", ACTIVATION_CHECKPOINT_INTERVAL)
        super().__init__(layers, **kwargs)

    def _partition_layers(self, method="uniform"):
        num_stages = self._topo.get_dim("pipe")
        stage_id = self._topo.get_coord(self.global_rank).pipe
        if num_stages != len(PARTS) - 1 or len(self._layer_specs) != PARTS[-1]:
            raise ValueError(
                f"plan has {{len(PARTS) - 1}} stages over {{PARTS[-1]}} layers; this module has "
                f"{{num_stages}} stages over {{len(self._layer_specs)}} layers")
        self.parts = list(PARTS)
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])
'''


def deepspeed_parts(plan: Plan) -> list[int]:
    """Stage boundaries ``parts`` (length stages + 1), after checking DeepSpeed can run the plan."""
    sched = check_exportable(plan, _FMT)
    style = placement_style(plan)
    if plan.num_stages != plan.pp or style != "loop":
        what = ("V placement" if style == "v" else f"stage-to-rank map {plan.ranks()}" if
                plan.num_stages == plan.pp else f"{plan.num_stages // plan.pp} stages per rank")
        raise ExportError(_FMT, f"the plan uses {what}; DeepSpeed's PipelineModule holds one stage "
                          "per rank, stage s on rank s", "plan with --vpp 1 --placement loop")
    if has_fused(sched):
        raise ExportError(_FMT, "the schedule fuses F and B into OVERLAP_F_B pairs, which DeepSpeed "
                          "cannot run", "plan with --schedule 1f1b")
    moved = moved_w(sched)
    if moved:
        r, pos, w = moved[0]
        raise ExportError(_FMT, f"{w} (rank {r}, position {pos}) runs apart from its input-gradient; "
                          "DeepSpeed runs each backward whole", "plan with --schedule 1f1b")
    diff = first_difference(sched, one_f_one_b(plan.pp, plan.num_microbatches))
    if diff:
        r, pos, got, want = diff
        raise ExportError(_FMT, f"rank {r} runs {got} at step {pos} where DeepSpeed's 1F1B "
                          f"TrainSchedule runs {want}", "plan with --schedule 1f1b")
    return [a for a, _ in plan.bounds()] + [int(plan.model.num_layers)]


def deepspeed_snippet(plan: Plan) -> str:
    """Python source of a ``PipelineModule`` subclass with the plan's ``parts``."""
    parts = deepspeed_parts(plan)
    layout = plan.model.layout or ""
    note = (f"{layout.count('E')} embedding, {layout.count('t')} decoder, {layout.count('m')} MTP, "
            f"{layout.count('L')} head" if layout else f"{parts[-1]} layers")
    size = int(plan.microbatches.size)
    config = {"train_micro_batch_size_per_gpu": size, "gradient_accumulation_steps": plan.num_microbatches}
    mode = plan.cluster.settings.recompute or "none"
    return _SNIPPET.format(name=plan.model.name, layout_note=note, config=config, pp=plan.pp,
                           parts=parts, interval=checkpoint_interval(plan), recompute=mode)


def checkpoint_interval(plan: Plan) -> int:
    """``PipelineModule(activation_checkpoint_interval=...)`` for the plan's recomputation mode.

    DeepSpeed checkpoints whole runs of ``interval`` layers (``deepspeed/runtime/pipe/module.py``,
    ``forward``: ``activation_checkpoint_func(exec_range_func(start, end), ...)``), so it has
    full recomputation (interval 1: each layer from its input, what the plan's ``full`` costs)
    and none, but no selective mode.
    """
    mode = plan.cluster.settings.recompute or "none"
    if mode in ("selective", OP) or is_module_set(mode):
        raise ExportError(_FMT, "the plan recomputes selectively (attention core, activations); DeepSpeed's "
                          "PipelineModule only checkpoints whole layers", "plan with --recompute full or none")
    return 1 if mode == "full" else 0
