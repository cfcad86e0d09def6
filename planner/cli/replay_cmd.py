"""``ppplan replay``: run a plan on torch.distributed and compare with its prediction."""

from __future__ import annotations

import json

import click

from planner.cli.common import check_outputs, fail

__all__ = ["COMMANDS"]


@click.command("replay")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--scale", type=click.FloatRange(min=0, max=1, min_open=True), help="Width factor of the replayed model (default: the plan's profile scale).")
@click.option("--seq-len", type=click.IntRange(min=1), help="Tokens per sequence (default: the plan's).")
@click.option("--steps", type=click.IntRange(min=1), default=5, show_default=True, help="Timed steps.")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True, help="Untimed steps first.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--threads", type=click.IntRange(min=1), help="Torch threads per rank on CPU (default: cores / ranks).")
@click.option("--bind-cores/--no-bind-cores", default=True, show_default=True, help="On CPU, bind each rank to cores of its own when there are enough (fused pairs hand over at every all-to-all; a rank sharing cores waits for the other's time slice).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True, help="Seconds any collective or receive may wait.")
@click.option("--deadline", "deadline_s", type=click.FloatRange(min=0, min_open=True), default=900.0, show_default=True, help="Seconds for the whole replay.")
@click.option("--no-grad-check", is_flag=True, help="Skip the single-process gradient check.")
@click.option("--out", type=click.Path(dir_okay=False), default="replay.json", show_default=True)
@click.option("--trace", type=click.Path(dir_okay=False), help="Also write a Chrome/Perfetto trace (measured and predicted).")
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON instead of the summary.")
@click.option("--ep", type=click.IntRange(min=1), help="Expert-parallel ranks per stage (pp x ep processes; default 1: every expert local).")
@click.option("--link", type=click.Choice(["real", "emulated"]), default="real", show_default=True, help="MoE all-to-alls: real, or emulated (local copies held to the analytical model's time; figures labelled emulated).")
@click.option("--link-scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True, help="Factor on the emulated link's times.")
@click.option("--moe-expert-capacity-factor", type=float, help="Megatron's capacity mode: each expert takes at most ceil(tokens x top_k / experts x C) copies of a rank's tokens, the rest dropped (default: dropless).")
@click.option("--moe-pad-expert-input-to-capacity", is_flag=True, help="Pad every expert's buffer to capacity: static all-to-all splits, no host sync in a MoE layer (needs --moe-expert-capacity-factor).")
@click.option("--moe-token-drop-policy", default="probs", show_default=True, help="Which copies over capacity are dropped: probs (lowest routing weight) or position (latest tokens).")
@click.option("--fault", hidden=True, help="Test hook: die:RANK or hang:RANK.")
def replay_command(plan_path: str, out: str, trace: str | None, as_json: bool, no_grad_check: bool,
                   **options) -> None:
    """Replay PLAN as a pipeline-parallel training step (one process per pipeline rank, or
    under torchrun) and report measured step time, MFU and prediction error."""
    from planner.api import load_plan
    from planner.cli.common import echo_json
    from planner.core.outputs import write_files_atomic
    from planner.replay import ReplayFailed, ReplayOptions, replay
    from planner.replay.report import text_summary

    check_outputs({"--out": out, "--trace": trace}, inputs=[plan_path])
    from planner.simulation import require_valid

    plan = require_valid(load_plan(plan_path), "replayed")
    try:
        result = replay(plan, ReplayOptions(grad_check=not no_grad_check, **options))
    except ReplayFailed as exc:
        click.echo(f"error: replay failed: {exc}", err=True)
        fail(3)
    if result is None:  # a torchrun rank other than 0
        return
    files = {out: json.dumps(result.report, indent=1) + "\n"}
    if trace:
        files[trace] = json.dumps(result.trace, indent=1) + "\n"
    write_files_atomic(files)
    if as_json:
        echo_json(result.report)
    else:
        click.echo(text_summary(result.report))
        click.echo(f"wrote {out}" + (f" and {trace}" if trace else ""))
    if result.report["grad_check"].get("passed") is False:
        fail(4)


COMMANDS = [replay_command]
