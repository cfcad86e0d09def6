"""``ppplan plan``: the main job."""

from __future__ import annotations

import click

from planner.cli.common import SEED_MAX, FiniteFloat, check_outputs, echo_json
from planner.cli.plan_options import GPU_HELP, LAYOUT_HELP, MEMORY_LIMIT_HELP, Deadline, MemoryLimit
from planner.cli.summary import plan_summary
from planner.core.cluster import RECOMPUTE_CHOICES
from planner.core.devices import DEVICE_ORDERS
from planner.core.limits import BATCH_LIMITS, MAX_GPUS
from planner.core.placement import PLACEMENTS
from planner.core.targets import TARGET_NAMES
from planner.options import DEFAULT_MODEL, PlanOptions
from solvers.partition.search import METHODS
from solvers.schedule.search.search import OBJECTIVES, SCHEDULE_CHOICES

__all__ = ["COMMANDS"]

_DEFAULT = PlanOptions()
"""The options' defaults: the flags show and use the record's own."""


class MicrobatchCount(click.ParamType):
    """A positive integer or ``auto``."""

    name = "M|auto"

    def convert(self, value, param, ctx):  # noqa: D102 - click's hook
        if isinstance(value, int) or value == "auto":
            return value
        try:
            count = int(value)
        except ValueError:
            self.fail(f"{value!r} is neither a positive integer nor auto", param, ctx)
        if count < 1:
            self.fail(f"{count} is not >= 1 (or use auto)", param, ctx)
        return count


@click.command("plan", help=f"Plan MODEL (a shipped id or config.json; default {DEFAULT_MODEL}) and write the plan JSON.")
@click.argument("model", required=False)
@click.option("--cluster", "cluster", type=click.Path(dir_okay=False), help="Cluster YAML (default: the model's own under planner/data/clusters/).")
@click.option("--pp", type=click.IntRange(min=1, max=MAX_GPUS), help="Pipeline-parallel ranks.")
@click.option("--vpp", type=click.IntRange(min=1, max=MAX_GPUS), help="Virtual stages per rank.")
@click.option("--tp", type=click.IntRange(min=1, max=MAX_GPUS), help="Tensor-parallel degree.")
@click.option("--ep", type=click.IntRange(min=1, max=MAX_GPUS), help="Expert-parallel degree.")
@click.option("--dp", type=click.IntRange(min=1, max=MAX_GPUS), help="Data-parallel replicas (default: GPUs / (pp x tp)).")
@click.option("--gpus", type=click.IntRange(min=1, max=MAX_GPUS), help="Choose tp, pp, vpp, ep, cp, dp and micro-batch size for this many GPUs (memory-feasible only), plan the best few fully and print the ranked top 10.")
@click.option("--gpu", metavar="GPU", help=GPU_HELP)
@click.option("--devices", metavar="TYPE:N[:GiB],...", help="A mixed fleet: GPU groups in pipeline-rank order, e.g. h100:16,a100:16 or a100:16,a100:16:40 (40 GiB A100s); each group holds whole pipeline ranks of tp x cp x dp GPUs, pp follows (dp with --pp); slower or smaller GPUs get fewer layers (docs/hetero.md).")
@click.option("--devices-order", type=click.Choice(DEVICE_ORDERS), default=_DEFAULT.devices_order, show_default=True, help="With --devices: pipeline ranks to the groups in the order listed, or search every order of the groups (up to 4) and keep the fastest plan (it plans once per order).")
@click.option("--sites", type=click.IntRange(min=1, max=MAX_GPUS), help="Split the GPUs evenly over this many sites joined by one slow link (with --inter-site-gbps); pp or dp crosses it: ppplan plans both (each with the full --work, so about twice the planning time) and keeps the faster (see docs/sites.md).")
@click.option("--inter-site-gbps", type=FiniteFloat(min=0, min_open=True, max=1e6), help="Inter-site link bandwidth in Gb/s (bits), one direction, shared by every flow crossing it.")
@click.option("--inter-site-latency-ms", type=FiniteFloat(min=0, max=1e5), help="Latency of one message over the inter-site link, milliseconds (default: the cluster file's, else 0).")
@click.option("--global-batch", type=click.IntRange(min=1, max=BATCH_LIMITS["global_batch"]), help="Sequences per step.")
@click.option("--seq-len", type=click.IntRange(min=1, max=BATCH_LIMITS["seq_len"]), help="Tokens per sequence.")
@click.option("--recompute", type=click.Choice(RECOMPUTE_CHOICES),
              help="Activation recomputation (default: the cluster's, auto unless it says; auto plans "
                   "with none, selective and full and keeps the fastest plan that fits memory; op is "
                   "torchtitan's per-op selective checkpointing, planned when named).")
@click.option("--recompute-modules", metavar="M1,M2", multiple=True,
              help="Megatron's selective recomputation modules instead: some of core_attn, moe_act, layernorm, "
                   "mla_up_proj, mlp, moe, shared_experts, comma separated (e.g. moe_act,layernorm); repeated: "
                   "plan with each list and keep the fastest plan that fits.")
@click.option("--offload", metavar="N|M1,M2", multiple=True,
              help="Activation offloading to host memory (Megatron only; default: the cluster's training.offload, "
                   "none unless it says): a number of layers (--cpu-offloading-num-layers N, pp 1, no "
                   "recomputation) or Megatron's --offload-modules, some of attn_norm, qkv_linear, mlp_norm, "
                   "expert_fc1, moe_act, comma separated; none to turn it off; repeated: plan with each and keep "
                   "the fastest plan that fits.")
@click.option("--microbatches", type=MicrobatchCount(), help="Microbatches per step, or auto to try every count dividing the per-replica batch (default: per-replica batch / micro-batch size).")
@click.option("--memory-gib", type=FiniteFloat(min=0, min_open=True, max=2**20), help="Per-GPU memory limit in GiB (default: GPU memory minus headroom).")
@click.option("--partition", type=click.Choice(METHODS), default=_DEFAULT.partition, show_default=True,
              help="Stage boundaries balanced on post-overlap costs (overlap), on serial costs, on FLOPs, "
                   "or equal layer counts (uniform).")
@click.option("--first-stage-layers", type=click.IntRange(min=0), help="Pin the decoder layers of the first stage (it also holds the embedding); like Megatron's --decoder-first-pipeline-num-layers.")
@click.option("--last-stage-layers", type=click.IntRange(min=0), help="Pin the decoder layers of the last stage (it also holds MTP and the loss head); like Megatron's --decoder-last-pipeline-num-layers.")
@click.option("--layout", metavar="LAYOUT", help=LAYOUT_HELP)
@click.option("--keep-layout", is_flag=True, default=_DEFAULT.keep_layout, help="With --layout: write the plan of your layout (schedule, W placement and recomputation still chosen for it) instead of ppplan's; ppplan's free plan becomes its 'ppplan' baseline.")
@click.option("--schedule", type=click.Choice(SCHEDULE_CHOICES), default=_DEFAULT.schedule, show_default=True, help="Schedule family; auto = best heuristic for the costs (CP-SAT polish when >1% above the lower bound); cpsat = CP-SAT from the best heuristic within --work.")
@click.option("--memory-limit", type=MemoryLimit(), help=MEMORY_LIMIT_HELP)
@click.option("--deadline", multiple=True, type=Deadline(), help="Latest end of a task in seconds, e.g. 0W3=0.8, or W=1.5 for every W (repeatable).")
@click.option("--placement", type=click.Choice(PLACEMENTS), default=_DEFAULT.placement, show_default=True,
              help="Virtual stages on ranks with --vpp > 1: loop (stage s on rank s mod pp, interleaved "
                   "1F1B) or v (down then back up, rank 0 holds the first and last stage: ZB-V, DualPipeV).")
@click.option("--target", type=click.Choice(TARGET_NAMES), default=_DEFAULT.target, show_default=True, help="Framework that will run the plan: the search considers only what it executes (schedules, placement, fused pairs, recomputation), and megatron / torchtitan fill the cluster fields the file leaves open (dispatcher, kernels, CUDA graphs, FSDP, recomputation) from that framework's recipe for the model; see the README's targets table.")
@click.option("--profile", type=click.Path(dir_okay=False), help="Measured cost table (ppplan profile) instead of the analytical model.")
@click.option("--seed", type=click.IntRange(min=0, max=SEED_MAX), default=_DEFAULT.seed, show_default=True, help="Seed of the searching solvers (0 .. 2^63-1): the same inputs and seed give the same plan.")
@click.option("--work", type=FiniteFloat(min=0, min_open=True, max=86400), default=_DEFAULT.work, show_default=True,
              help="Search effort in reference seconds (about that many seconds on an idle 2-core machine), "
                   "counted in work, not read off a clock: the same inputs, --seed and --work give the same "
                   "plan on any machine at any load. Lower it for a quicker plan.")
@click.option("--time-limit", type=FiniteFloat(min=0, min_open=True, max=86400),
              help="Wall-clock safety cap in seconds (default: none). When it fires, phases stop with their "
                   "best so far and the summary's first line says so: the plan may then differ between runs.")
@click.option("--objective", type=click.Choice(OBJECTIVES), default=_DEFAULT.objective, show_default=True, help="What the search minimises: one step's makespan, or steady = the period of repeated steps with no global barrier (each rank's optimizer step after its own last W; see planner/core/steady.py). Both are reported.")
@click.option("--out", type=click.Path(dir_okay=False), default="plan.json", show_default=True, help="Plan JSON to write (read by validate, simulate, export, replay and replan).")
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON instead of the summary.")
@click.option("--png", type=click.Path(dir_okay=False), help="Also draw the plan (Gantt, memory, stage costs) to this PNG (needs matplotlib).")
@click.option("--quiet", is_flag=True, help="No progress bar and no summary (errors and --json output only).")
def plan_command(model: str | None, cluster: str | None, out: str, as_json: bool, png: str | None,
                 quiet: bool, **options) -> None:
    from planner.api import plan
    from planner.core.outputs import write_files_atomic
    from planner.progress import progress, set_quiet

    check_outputs({"--out": out, "--png": png}, inputs=_plan_inputs(model, cluster, options.get("profile")))
    set_quiet(quiet)
    if png:
        from planner.plot import require_matplotlib

        require_matplotlib("--png")
    limit, work = options.get("time_limit"), options["work"]
    budget = f"work {work:g}" + ("" if limit is None else f", time limit {limit:g} s")
    with progress(f"planning {model or 'default model'} ({budget})", total=limit or work, unit="s", clock=True):
        # every flag but the outputs is a PlanOptions field (--first-stage-layers: first_stage_layers)
        result = plan(model, cluster, PlanOptions(**options))
    files: dict[str, str | bytes] = {out: result.to_json()}
    if png:
        from planner.plot import png_bytes

        files[png] = png_bytes(result)
    write_files_atomic(files)  # last, together: an error or Ctrl-C before here writes nothing
    if as_json:
        echo_json(result.to_dict())
    elif not quiet:
        click.echo(plan_summary(result))
        if result.solver.degrees is not None:  # --gpus
            from planner.cli.degrees_table import degrees_text

            click.echo(degrees_text(result.solver.degrees))
        click.echo(f"wrote {out}" + (f", {png}" if png else ""))


def _plan_inputs(model: str | None, cluster: str | None, profile: str | None) -> list[str]:
    """Files ``ppplan plan`` reads (a model folder stands for its config.json)."""
    from pathlib import Path

    found = [p for p in (cluster, profile) if p]
    if model and Path(model).exists():
        found.append(str(Path(model) / "config.json") if Path(model).is_dir() else model)
    return found


COMMANDS = [plan_command]
