"""Plan -> torch.distributed.pipelining schedule CSV, and -> torchtitan options.

torch CSV (``_PipelineScheduleRuntime._load_csv(path, format="compute_only")``): one row
per pipeline rank, one cell per action in torch's own text form (``2F0``, ``2I0``,
``2W0``, ``2B0``, ``(0F3;7I1)OVERLAP_F_B``). torch infers the stage-to-rank map from the
rows, so the plan's placement (loop, V or any other) carries over as is.

torchtitan (``torchtitan/distributed/pipeline_parallel.py``): with
``parallelism.pipeline_parallel_schedule_csv`` set it runs ``_PipelineScheduleRuntime``
on the CSV, but builds each rank's stages from ``module_fqns_per_model_part`` with a
placement chosen by the schedule *name*: "v" for ZBVZeroBubble and DualPipeV (exactly 2
stages per rank), "loop" for every other name. It registers an OVERLAP_F_B callback only
for a DualPipeV schedule object, never for the CSV runtime, so fused pairs would run one
after the other: such plans are refused.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from planner.core.plan import Plan
from planner.export.schedule import ExportError, check_exportable, has_fused, placement_style, split_w

__all__ = ["torch_csv", "torchtitan_options", "torchtitan_schedule_name", "module_fqns",
           "torchtitan_overrides"]


def torch_csv(plan: Plan, *, fmt: str = "torch-csv") -> str:
    """Compute-only schedule CSV for ``_PipelineScheduleRuntime._load_csv``."""
    sched = check_exportable(plan, fmt)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for rank in range(plan.pp):
        writer.writerow([str(a) for a in sched.get(rank, [])])
    return buf.getvalue()


def torchtitan_schedule_name(plan: Plan) -> str:
    """A torchtitan schedule name whose stage placement matches the plan's."""
    sched = check_exportable(plan, "torchtitan")
    if plan.pp < 2:
        raise ExportError("torchtitan", "pp is 1: torchtitan builds no pipeline stages",
                          "plan with --pp 2 or more")
    if has_fused(sched):
        raise ExportError("torchtitan", "the schedule fuses F and B into OVERLAP_F_B pairs, which "
                          "torchtitan's CSV runtime runs one after the other (its overlap callback "
                          "is only for DualPipeV)", "use --format torch-csv and register an "
                          "OVERLAP_F_B function, or plan without fused pairs (--schedule 1f1b)")
    style = placement_style(plan)
    vpp = plan.num_stages // plan.pp
    if style == "v":
        if vpp != 2:
            raise ExportError("torchtitan", f"V placement with {vpp} stages per rank; torchtitan's "
                              "V schedules hold exactly 2", "plan with --vpp 2")
        return "ZBVZeroBubble"
    if style == "custom":
        raise ExportError("torchtitan", f"stage-to-rank map {plan.ranks()} is neither loop nor V, "
                          "the only placements torchtitan builds", "use --format torch-csv")
    if vpp == 1:
        return "1F1B"
    return "InterleavedZeroBubble" if split_w(sched) else "Interleaved1F1B"


def module_fqns(plan: Plan, *, fmt: str = "torchtitan") -> list[list[str]]:
    """torchtitan module FQNs per stage: tok_embeddings, layers.N, norm + lm_head (0.3; 0.2 named
    the head ``output``)."""
    layout = plan.model.layout or ""
    if len(layout) != int(plan.model.num_layers):
        raise ExportError(fmt, "plan.model.layout is missing or does not have one letter per layer",
                          "re-plan with this version of ppplan", replan=False)
    if "m" in layout:
        # torchtitan/models/deepseek_v3/mtp.py: "MTP does not support pipeline parallelism yet"
        raise ExportError(fmt, f"layer {layout.index('m')} is an MTP layer and torchtitan runs MTP "
                          "only without pipeline parallelism", "plan the model from its config.json "
                          "with num_nextn_predict_layers (or mtp_num_hidden_layers) 0, or use --format "
                          "megatron / torch-csv", replan=False)  # no --target makes torchtitan run it
    names = {"E": ["tok_embeddings"], "L": ["norm", "lm_head"]}  # torchtitan 0.3 models/common/decoder.py
    out, decoder = [], 0
    for a, b in plan.bounds():
        part: list[str] = []
        for letter in layout[a:b]:
            if letter == "t":
                part.append(f"layers.{decoder}")
                decoder += 1
            else:
                part += names[letter]
        out.append(part)
    return out


def torchtitan_options(plan: Plan, *, csv_path: str = "schedule.csv") -> dict[str, dict[str, Any]]:
    """torchtitan 0.3 config fields (``parallelism``, ``training``) that run ``plan``.

    The schedule CSV itself is ``torch_csv(plan)``, to be written at ``csv_path``.
    """
    name = torchtitan_schedule_name(plan)
    size = int(plan.microbatches.size)
    par: dict[str, Any] = {
        "pipeline_parallel_degree": plan.pp,
        "pipeline_parallel_schedule": name,
        "pipeline_parallel_schedule_csv": csv_path,
        "pipeline_parallel_microbatch_size": size,
    }
    par["tensor_parallel_degree"] = int(plan.parallel.tp)
    par["expert_parallel_degree"] = int(plan.parallel.ep)
    par["module_fqns_per_model_part"] = module_fqns(plan)
    training: dict[str, Any] = {"local_batch_size": plan.num_microbatches * size}
    seq = plan.cluster.settings.seq_len
    if seq:
        training["seq_len"] = int(seq)
    return {"parallelism": par, "training": training}


def torchtitan_overrides(options: dict[str, dict[str, Any]]) -> list[str]:
    """Command-line overrides for the scalar options (FQN lists live in the config module only)."""
    out = []
    for section, values in options.items():
        for key, v in values.items():
            if not isinstance(v, list):
                out += [f"--{section}.{key}", str(v)]
    return out
