"""``ppplan export``: a plan in a framework's own format."""

from __future__ import annotations

import click

from planner.cli.common import check_outputs, echo_json
from planner.export import FORMATS

__all__ = ["COMMANDS"]


@click.command("export")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(FORMATS), required=True,
              help="torch-csv (_PipelineScheduleRuntime CSV), torchtitan (Python config module + CSV), "
                   "megatron (arguments), megatron-bridge (recipe overrides, YAML), deepspeed "
                   "(PipelineModule subclass), trace (Chrome/Perfetto JSON).")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Main output file (default: schedule.csv, torchtitan_config.py, megatron_args.txt, "
                   "megatron_bridge_overrides.yaml, deepspeed_pipeline.py or trace.json), '-' for "
                   "stdout; torchtitan writes its CSV beside it.")
@click.option("--json", "as_json", is_flag=True, help="Print what was exported as JSON.")
def export_command(plan_path: str, fmt: str, out: str | None, as_json: bool) -> None:
    """Export PLAN for a training framework, or refuse naming what it cannot express."""
    from planner.api import load_plan
    from planner.export import LaunchPlan, export_plan, write_export

    if out == "-" and fmt == "torchtitan":
        raise click.BadParameter("torchtitan needs its schedule CSV in a file; give a path",
                                 param_hint="--out")
    check_outputs({"--out": out}, inputs=[plan_path])
    result = export_plan(LaunchPlan.of(load_plan(plan_path)), fmt, out=out)
    if out != "-":  # every file, e.g. torchtitan's CSV beside the config module
        for path in result.files:
            check_outputs({"--out": path}, inputs=[plan_path])
    if out == "-":
        click.echo(result.files["-"], nl=False)
        return
    write_export(result)
    if as_json:
        echo_json(result.summary)
        return
    summary = result.summary
    if fmt == "megatron":
        click.echo(" ".join(_quoted(summary["args"])))
        if summary["alternative"]:
            click.echo("without a layout string: " + " ".join(_quoted(summary["alternative"])))
    elif fmt == "torchtitan":
        for form, overrides in summary["overrides"].items():
            click.echo(f"torchtitan {form}: " + " ".join(overrides))
    elif fmt == "deepspeed":
        click.echo(f"parts {summary['parts']}")
    if "device_note" in summary:
        click.echo(summary["device_note"])
    click.echo("wrote " + ", ".join(result.files))


def _quoted(args: list[str]) -> list[str]:
    import shlex

    return [shlex.quote(a) for a in args]


COMMANDS = [export_command]
