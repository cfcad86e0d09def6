"""``ppplan simulate`` and ``ppplan validate``: replay a plan's schedule against its costs."""

from __future__ import annotations

import click

from planner.cli.common import check_outputs, echo_json, fail

__all__ = ["COMMANDS"]


@click.command("simulate")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the simulation as JSON.")
@click.option("--png", type=click.Path(dir_okay=False), help="Draw the timeline, memory and stage costs to this PNG (needs matplotlib).")
@click.option("--quiet", is_flag=True, help="Print nothing but errors and --json output.")
def simulate_command(plan_path: str, as_json: bool, png: str | None, quiet: bool) -> None:
    """Simulate PLAN's schedule with its embedded stage costs."""
    from planner.simulation import simulate_plan

    check_outputs({"--png": png}, inputs=[plan_path])
    report = simulate_plan(plan_path)
    if png:
        from planner.core.plan import load_plan_file
        from planner.plot import render_png

        render_png(load_plan_file(plan_path), png)
    if as_json:
        echo_json(report)
        return
    if quiet:
        return
    click.echo(f"step {report['step_time_s']:.4f} s  bubble {report['bubble_fraction']:.1%}"
               f"  MFU {report['mfu']:.1%}")
    for r, (busy, peak) in enumerate(zip(report["busy_s"], report["peak_memory_bytes"])):
        click.echo(f"rank {r}: busy {busy:.4f} s  bubble {report['step_time_s'] - busy:.4f} s"
                   f"  peak {peak / 2**30:.2f} GiB")
    click.echo("critical path: " + " -> ".join(report["critical_path"][:16])
               + (" ..." if len(report["critical_path"]) > 16 else ""))
    if "user_layout" in report:  # recorded at planning time (--layout)
        from planner.cli.summary import layout_line
        from planner.core.plan import load_plan_file

        click.echo(f"{layout_line(load_plan_file(plan_path))} (as planned)")


@click.command("validate")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print {valid, problems} as JSON (exit code unchanged).")
def validate_command(plan_path: str, as_json: bool) -> None:
    """Check PLAN: exit 0 when valid, 1 with the fault and the grid around it when not."""
    from planner.simulation import validate_plan

    problems = validate_plan(plan_path)
    if as_json:
        echo_json({"plan": plan_path, "valid": not problems, "problems": problems})
        if problems:
            fail(1)
        return
    if not problems:
        click.echo(f"{plan_path}: valid")
        return
    click.echo(f"{plan_path}: INVALID", err=True)
    click.echo(problems[0], err=True)
    if len(problems) > 1:
        click.echo(f"... and {len(problems) - 1} more", err=True)
    fail(1)


COMMANDS = [simulate_command, validate_command]
