"""Plan -> Megatron-LM arguments.

``--pipeline-model-parallel-layout``: its grammar has one owner, ``planner.core.layout_text``
(which also reads the ``--layout`` users give ``ppplan plan``). Stage i runs as virtual chunk i // pp on
pipeline rank i % pp, so only loop placement is expressible. MTP layers must all sit in
one stage, the last virtual chunk of its rank (``validate_layer_layout``).

Megatron runs its own schedule: 1F1B, interleaved 1F1B (microbatch groups of pp), or,
with ``--overlap-moe-expert-parallel-comm``, the combined 1F1B that fuses F of one
microbatch with B of another (our ``interleaved-overlap``; it needs virtual stages when
pp > 1, expert parallelism, no full recomputation, at most one MTP layer).
``--delay-wgrad-compute`` splits W off
inside a fused step. A plan is exported only when its schedule is one of these; W moved
further (zero-bubble style), GPipe or solver-made orders are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.core.errors import InfeasibleError
from planner.core.layout_text import compress_stage, join_stages, mtp_problem
from planner.core.model import ROLE_LETTERS
from planner.core.plan import Plan
from planner.core.schedule import ActionKind, Schedule
from planner.export.megatron_flags import RECOMPUTE_MODULES, companion_flags, recompute_args, render
from planner.export.schedule import (ExportError, check_exportable, first_difference, has_fused,
                                     kind_order, merged_order, moved_w, placement_style, split_w)
from solvers.schedule.families.generators import interleaved_1f1b

__all__ = ["MegatronArgs", "megatron_args", "megatron_layout", "compress_stage", "stage_letters", "recompute_args",
           "RECOMPUTE_MODULES"]

_FMT = "megatron"


@dataclass(frozen=True, kw_only=True)
class MegatronArgs:
    """Megatron-LM command-line arguments for one plan."""

    args: list[str]
    """Arguments with ``--pipeline-model-parallel-layout``."""
    layout: str
    """The layout string alone."""
    alternative: list[str] | None
    """Equivalent arguments without a layout (decoder-first/last counts), when expressible."""
    flags: list[str]
    """Switches the plan's schedule needs (also inside ``args``)."""
    env: dict[str, str]
    """Environment variables Megatron needs for these flags (``megatron_flags``)."""
    settings: dict[str, Any]
    """``args`` as values (argument destination -> value, ``megatron_flags.render``), plus the
    virtual pipeline size the layout implies (``virtual_pipeline_model_parallel_size``)."""


def stage_letters(plan: Plan) -> list[str]:
    """Layer letters (E, t, m, L) of each stage."""
    layout = plan.model.layout or ""
    if len(layout) != int(plan.model.num_layers) or set(layout) - set(ROLE_LETTERS.values()):
        raise ExportError(_FMT, "plan.model.layout must hold one letter E, t, m or L per layer",
                          "re-plan with this version of ppplan", replan=False)
    return [layout[a:b] for a, b in plan.bounds()]


def megatron_layout(plan: Plan) -> str:
    """The ``--pipeline-model-parallel-layout`` string of the plan's partition."""
    letters = stage_letters(plan)
    style = placement_style(plan)
    if style != "loop":
        raise ExportError(_FMT, f"the plan places stages on ranks {plan.ranks()} ({style} placement) "
                          "but Megatron runs stage i on pipeline rank i % pp",
                          "plan with --placement loop or use --format torch-csv")
    problem = mtp_problem(letters, plan.pp)
    if problem is not None:
        raise ExportError(_FMT, problem[0], "re-plan (or use --format torch-csv)")
    return join_stages([compress_stage(t) for t in letters])


def _uniform_counts(n: int, pp: int, vpp: int, first: int | None, last: int | None) -> list[int] | None:
    """Decoder layers per stage Megatron builds without a layout, or None when it refuses."""
    per_rank = [0] * pp
    rest, left = n - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
    if rest < 0 or (left > 0 and rest % left) or (left == 0 and rest):
        return None
    for r in range(pp):
        per_rank[r] = rest // left if left else 0
    if first is not None:
        per_rank[0] = first
    if last is not None:
        per_rank[-1] = last
    if any(c % vpp for c in per_rank):
        return None
    return [per_rank[s % pp] // vpp for s in range(pp * vpp)]


def _first_last_args(plan: Plan, letters: list[str]) -> list[str] | None:
    """``--decoder-first/last-pipeline-num-layers`` (+ virtual stages) giving the same partition."""
    pp, vpp = plan.pp, plan.num_stages // plan.pp
    if pp < 2 or not letters[0].startswith("E") or "L" not in letters[-1]:
        return None
    if any("m" in t for t in letters[:-1]):
        return None
    want = [t.count("t") for t in letters]
    first, last = sum(want[0::pp]), sum(want[pp - 1::pp])
    extra = ["--num-virtual-stages-per-pipeline-rank", str(vpp)] if vpp > 1 else []
    for f, l in ((None, None), (first, None), (None, last), (first, last)):
        if _uniform_counts(sum(want), pp, vpp, f, l) == want:
            flags = (["--decoder-first-pipeline-num-layers", str(f)] if f is not None else [])
            flags += (["--decoder-last-pipeline-num-layers", str(l)] if l is not None else [])
            return flags + extra
    return None


def _check_schedule(plan: Plan, sched: Schedule, n_mtp: int) -> list[str]:
    """Flags the schedule needs; refuses orders Megatron does not run."""
    pp, vpp = plan.pp, plan.num_stages // plan.pp
    fused = has_fused(sched)
    moved = moved_w(sched)
    if moved:
        r, pos, w = moved[0]
        raise ExportError(_FMT, f"{w} (rank {r}, position {pos}) runs apart from its input-gradient; "
                          "Megatron computes W inside its backward step", "use --format torch-csv "
                          "or plan a schedule without moved W")
    if fused:
        _check_overlap(plan, pp, vpp, n_mtp)
    try:
        ref = interleaved_1f1b(pp, vpp, plan.num_microbatches)
    except InfeasibleError as exc:
        raise ExportError(_FMT, f"Megatron's interleaved schedule cannot run this shape: {exc}") from None
    views = [lambda a: kind_order(a, ActionKind.F), lambda a: kind_order(a, ActionKind.B)] if fused else [merged_order]
    for view in views:
        diff = first_difference(sched, ref, view=view)
        if diff:
            r, pos, got, want = diff
            raise ExportError(_FMT, f"rank {r} runs {got} at step {pos} where Megatron's "
                              f"{'combined ' if fused else ''}1F1B runs {want}; Megatron takes no "
                              "explicit order", "use --format torch-csv, or plan with --schedule "
                              + (("interleaved-overlap" if vpp > 1 else "1f1b-overlap") if fused
                                 else "1f1b / interleaved"))
    flags = ["--overlap-moe-expert-parallel-comm"] if fused else []
    if fused and split_w(sched):
        flags.append("--delay-wgrad-compute")
    return flags


def _check_overlap(plan: Plan, pp: int, vpp: int, n_mtp: int) -> None:
    if pp > 1 and vpp == 1:
        raise ExportError(_FMT, "fused F&B pairs need --overlap-moe-expert-parallel-comm, which "
                          "Megatron runs only with virtual stages when pp > 1",
                          "plan with --vpp 2, or use --format torch-csv")
    if int(plan.parallel.ep) < 2:
        raise ExportError(_FMT, "fused F&B pairs need --overlap-moe-expert-parallel-comm, which needs "
                          "expert parallelism (ep > 1)", "plan with --ep 2 or more")
    if plan.cluster.settings.recompute == "full":
        raise ExportError(_FMT, "Megatron's EP overlap does not run with full recomputation",
                          "plan with --recompute selective or none")
    if n_mtp > 1:
        raise ExportError(_FMT, f"Megatron's EP overlap supports at most 1 MTP layer, the plan has {n_mtp}")
    if n_mtp and pp == 1:  # transformer_config.py: "Pipeline model parallel size must be larger than 1 ..."
        raise ExportError(_FMT, "Megatron's EP overlap with an MTP layer needs pp > 1", "plan with --pp 2 or more")


def megatron_args(plan: Plan) -> MegatronArgs:
    """Megatron-LM arguments that run ``plan`` (partition, microbatches, schedule flags)."""
    sched = check_exportable(plan, _FMT)
    layout = megatron_layout(plan)
    letters = stage_letters(plan)
    text = "".join(letters)
    n_mtp = text.count("m")
    flags = _check_schedule(plan, sched, n_mtp)
    overlap = "--overlap-moe-expert-parallel-comm" in flags
    more = companion_flags(plan, overlap=overlap)
    common: dict[str, Any] = {"num_layers": text.count("t"), "mtp_num_layers": n_mtp or None, **more.settings,
                              "microbatch_group_size_per_virtual_pipeline_stage":
                                  plan.pp if plan.num_stages > plan.pp else None,
                              "overlap_moe_expert_parallel_comm": overlap,
                              "delay_wgrad_compute": "--delay-wgrad-compute" in flags}
    head = {"pipeline_model_parallel_size": plan.pp}
    alt = _first_last_args(plan, letters)
    return MegatronArgs(args=render({**head, "pipeline_model_parallel_layout": layout, **common}),
                        layout=layout, flags=flags, env=more.env,
                        settings={**head, "pipeline_model_parallel_layout": layout,
                                  "virtual_pipeline_model_parallel_size": plan.num_stages // plan.pp, **common},
                        alternative=render(head) + alt + render(common) if alt is not None else None)
