"""``ppplan replan``: offline re-planning after MoE routing drift (``--routing``) or for another
GPU count (``--gpus``, ``--lost-ranks``); ``ppplan diff``: the migration map between two plans."""

from __future__ import annotations

import click

from planner.cli.common import FiniteFloat, check_outputs, echo_json
from planner.core.limits import MAX_GPUS

__all__ = ["COMMANDS"]


@click.command("replan")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--routing", "routing", multiple=True, type=click.Path(),
              help="Routing traces (repeatable): Megatron's tokens_per_expert/ folder (or its rank<R>.jsonl "
                   "files), or single-file ppplan JSON lines / {\"layers\": ...} JSON.")
@click.option("--gpus", type=click.IntRange(min=1, max=MAX_GPUS),
              help="Re-plan for this many GPUs: pp, dp, partition, microbatches and schedule chosen again, "
                   "the global batch kept; prints the migration map (instead of --routing).")
@click.option("--lost-ranks", help="Global ranks of the plan that are gone, e.g. 3,8-15: re-plan for the rest "
                                   "(instead of --routing or --gpus).")
@click.option("--allow-batch-change", is_flag=True,
              help="With --gpus/--lost-ranks: the global batch may drop by up to 1/8 to use every GPU.")
@click.option("--standby", metavar="TYPE:COUNT",
              help="With --gpus/--lost-ranks: spare GPUs (a GPU preset and a count, e.g. a100:8): which of the "
                   "old plan's pipeline roles they fit, and whether they replace the lost ranks.")
@click.option("--routing-format", type=click.Choice(["auto", "megatron", "jsonl", "json"]), default="auto",
              show_default=True, help="Trace format of --routing and --then (auto: a folder or rank<R>.jsonl "
                                      "files are megatron, a {\"layers\": ...} file json, other files jsonl).")
@click.option("--use-tp-pp-dp-mapping", "tp_pp_dp_mapping", is_flag=True,
              help="The Megatron run used --use-tp-pp-dp-mapping (rank order tp-cp-ep-pp-dp).")
@click.option("--expert-tensor-parallel-size", "expert_tp", type=click.IntRange(min=1),
              help="The Megatron run's --expert-tensor-parallel-size (default: the plan's etp, else 1, what "
                   "ppplan's Megatron export passes).")
@click.option("--window", type=click.IntRange(min=1), help="Use the last N iterations of the traces (default: all).")
@click.option("--min-gain", type=FiniteFloat(min=0), default=0.03, show_default=True,
              help="Smallest relative step-time gain that recommends re-partitioning.")
@click.option("--move-penalty", type=FiniteFloat(min=0), default=0.002, show_default=True,
              help="Share of the step time one moved layer costs when choosing among plans.")
@click.option("--then", "then", multiple=True, type=click.Path(),
              help="Trace of the routing the plan was made for (default: the plan's own routing section, else balanced).")
@click.option("--profile", type=click.Path(dir_okay=False), help="Measured cost table the plan was made from.")
@click.option("--work", type=FiniteFloat(min=0, min_open=True, max=86400),
              help="Search effort of the re-plan in reference seconds (default: the --work the plan was made with); "
                   "deterministic, like ppplan plan --work.")
@click.option("--model", help="Model id or config path, when the plan's model name is not a shipped id.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="New plan JSON (never the input plan).")
@click.option("--json", "as_json", is_flag=True, help="Print the new plan's replan section as JSON.")
def replan_command(plan_path: str, routing: tuple[str, ...], then: tuple[str, ...], out: str,
                   as_json: bool, gpus: int | None, lost_ranks: str | None, allow_batch_change: bool,
                   standby: str | None, **options) -> None:
    """Re-plan PLAN for the routing in the traces (drift report, new plan, migration cost,
    advice), or for the GPUs left (--gpus / --lost-ranks: new plan and migration map)."""
    given = [name for name, v in (("--routing", routing), ("--gpus", gpus), ("--lost-ranks", lost_ranks)) if v]
    if len(given) != 1:
        raise click.UsageError(f"pass exactly one of --routing, --gpus, --lost-ranks (got {', '.join(given) or 'none'})")
    check_outputs({"--out": out}, inputs=[plan_path, *routing, *then, options.get("profile")])
    from planner.simulation import require_valid

    old = require_valid(plan_path, "re-planned")
    if routing:
        if allow_batch_change or standby:
            flag = "--allow-batch-change" if allow_batch_change else "--standby"
            raise click.UsageError(f"{flag} goes with --gpus or --lost-ranks, not --routing")
        _drift(old, routing, then, out, as_json, options)
        return
    ignored = [f"--{k.replace('_', '-')}" for k in ("window", "profile", "expert_tp") if options.get(k) is not None]
    ignored += ["--then"] * bool(then) + ["--use-tp-pp-dp-mapping"] * bool(options.get("tp_pp_dp_mapping"))
    if ignored:
        raise click.UsageError(f"{ignored[0]} goes with --routing, not {given[0]}")
    _elastic(old, gpus, lost_ranks, allow_batch_change, standby, out, as_json, options)


def _drift(old, routing, then, out: str, as_json: bool, options: dict) -> None:
    from planner.replanning import replan
    from planner.replanning.report import render_report

    result = replan(old, list(routing), then=list(then) or None, **options)
    result.plan.save(out)
    if as_json:
        echo_json(result.plan.extra["replan"])
    else:
        click.echo(render_report(result))
        click.echo(f"wrote {out}")


def _elastic(old, gpus, lost_ranks, allow_batch_change: bool, standby: str | None, out: str, as_json: bool,
             options: dict) -> None:
    from planner.replanning.diff import render_elastic
    from planner.replanning.elastic import parse_lost_ranks, replan_gpus

    lost = parse_lost_ranks(lost_ranks, int(old.cluster.num_gpus)) if lost_ranks else ()
    result = replan_gpus(old, gpus=gpus, lost_ranks=lost, allow_batch_change=allow_batch_change,
                         work=options.get("work"), model=options.get("model"), standby=standby)
    result.plan.save(out)
    if as_json:
        echo_json(result.plan.extra["replan"] | {"migration": _summary(result.plan.extra["migration"])})
    else:
        click.echo(render_elastic(result.plan.extra["replan"], result.plan.extra["migration"]))
        click.echo(f"wrote {out}")


def _summary(m: dict) -> dict:
    """The migration section without its per-layer and per-stage lists (those are in the plan)."""
    return {k: v for k, v in m.items() if k not in ("layers", "stages")}


@click.command("diff")
@click.argument("old_path", metavar="OLD", type=click.Path(dir_okay=False))
@click.argument("new_path", metavar="NEW", type=click.Path(dir_okay=False))
@click.option("--model", help="Model id or config path, when the plans' model name is not a shipped id.")
@click.option("--json", "as_json", is_flag=True, help="Print the migration map as JSON.")
def diff_command(old_path: str, new_path: str, model: str | None, as_json: bool) -> None:
    """Migration map from plan OLD to plan NEW (same model): per layer the GPUs holding its
    state before and after and the bytes moved, each new stage's local layer names, the
    transfer time and the Megatron flags to reload with."""
    from planner.replanning.diff import plan_diff, render_migration

    m = plan_diff(old_path, new_path, model=model)
    echo_json(m) if as_json else click.echo(render_migration(m))


COMMANDS = [replan_command, diff_command]
