"""``ppplan replan``: offline re-planning after MoE routing drift."""

from __future__ import annotations

import click

from planner.cli.common import FiniteFloat, check_outputs, echo_json

__all__ = ["COMMANDS"]


@click.command("replan")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--routing", "routing", multiple=True, required=True, type=click.Path(),
              help="Routing traces (repeatable): Megatron's tokens_per_expert/ folder (or its rank<R>.jsonl "
                   "files), or single-file ppplan JSON lines / {\"layers\": ...} JSON.")
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
                   as_json: bool, **options) -> None:
    """Re-plan PLAN for the routing in the traces: drift report, new plan, migration cost, advice."""
    from planner.replanning import replan
    from planner.replanning.report import render_report

    check_outputs({"--out": out}, inputs=[plan_path, *routing, *then, options.get("profile")])
    from planner.simulation import require_valid

    require_valid(plan_path, "re-planned")
    result = replan(plan_path, list(routing), then=list(then) or None, **options)
    result.plan.save(out)
    if as_json:
        echo_json(result.plan.extra["replan"])
    else:
        click.echo(render_report(result))
        click.echo(f"wrote {out}")


COMMANDS = [replan_command]
