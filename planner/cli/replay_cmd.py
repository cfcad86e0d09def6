"""``ppplan replay``: run a plan on torch.distributed and compare with its prediction."""

from __future__ import annotations

import json
import os

import click

from planner.cli.common import SEED_MAX, FiniteFloat, check_outputs, fail

__all__ = ["COMMANDS"]


@click.command("replay")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--scale", type=click.FloatRange(min=0, max=1, min_open=True), help="Width factor of the replayed model (default: the plan's profile scale).")
@click.option("--seq-len", type=click.IntRange(min=1), help="Tokens per sequence (default: the plan's).")
@click.option("--steps", type=click.IntRange(min=1), default=5, show_default=True, help="Timed steps.")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True, help="Untimed steps first.")
@click.option("--seed", type=click.IntRange(min=0, max=SEED_MAX), default=0, show_default=True, help="Random seed of the synthetic weights and inputs (0 .. 2^63-1; the same seed gives the same numbers).")
@click.option("--threads", type=click.IntRange(min=1), help="Torch threads per rank on CPU (default: cores / ranks).")
@click.option("--bind-cores/--no-bind-cores", default=True, show_default=True, help="On CPU, bind each rank to cores of its own when there are enough (fused pairs hand over at every all-to-all; a rank sharing cores waits for the other's time slice).")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=1, max=86400), default=60.0, show_default=True, help="Seconds any collective or receive may wait.")
@click.option("--deadline", "deadline_s", type=FiniteFloat(min=1, max=7 * 86400), default=900.0, show_default=True, help="Seconds for the whole replay.")
@click.option("--no-grad-check", is_flag=True, help="Skip the single-process gradient check.")
@click.option("--out", type=click.Path(dir_okay=False), default="replay.json", show_default=True, help="Report JSON: measured and predicted step times, MFU, error, gradient check.")
@click.option("--trace", type=click.Path(dir_okay=False), help="Also write a Chrome/Perfetto trace (measured and predicted).")
@click.option("--json", "as_json", is_flag=True, help="Print the report JSON instead of the summary.")
@click.option("--ep", type=click.IntRange(min=1), help="Expert-parallel ranks per stage (pp x ep processes; default 1: every expert local).")
@click.option("--link", type=click.Choice(["real", "emulated"]), default="real", show_default=True, help="MoE all-to-alls: real, or emulated (local copies held to the analytical model's time; figures labelled emulated).")
@click.option("--link-share", type=FiniteFloat(min=0, max=1, min_open=True, max_open=True), help="Share of the MoE layers' time (compute measured here + exchanges) the emulated exchanges take (default: the analytical model's share on the plan's cluster).")
@click.option("--link-scale", type=FiniteFloat(min=0, min_open=True, max=1e6), help="Factor on the emulated link's analytical times, instead of --link-share.")
@click.option("--profile", type=click.Path(exists=True, dir_okay=False), help="The profile whose stored CPU peak MFU divides by on CPU (ppplan profile --device cpu measures it once). Default: the profile the plan records (its costs.profile, found from here or beside the plan, checked against its sha256); without one CPU MFU is n/a.")
@click.option("--calibrate", is_flag=True, help="Also replay two calibration plans (this plan's partition, 1F1B with full and with split backwards), their steps alternating with this plan's, and report the prediction they calibrate.")
@click.option("--moe-expert-capacity-factor", type=FiniteFloat(min=0, min_open=True, max=1e6), help="Megatron's capacity mode: each expert takes at most ceil(tokens x top_k / experts x C) copies of a rank's tokens, the rest dropped (default: dropless).")
@click.option("--moe-pad-expert-input-to-capacity", is_flag=True, help="Pad every expert's buffer to capacity: static all-to-all splits, no host sync in a MoE layer (needs --moe-expert-capacity-factor).")
@click.option("--moe-token-drop-policy", type=click.Choice(["probs", "position"]), default="probs", show_default=True, help="Which copies over capacity are dropped: probs (lowest routing weight) or position (latest tokens).")
@click.option("--modules", type=click.Choice(["native", "transformers"]), help="Build the stages from ppplan's layer modules or from the model family's own transformers classes (needs ppplan[hf]); default: the code the plan's profile timed (its costs.modules), else native.")
@click.option("--torch-profile", "torch_profile", type=click.Path(file_okay=False), help="Also record one PyTorch profiler trace per rank of the timed steps into this folder (read by ppplan profile --from-trace).")
@click.option("--fault", hidden=True, help="Test hook: die:RANK or hang:RANK.")
def replay_command(plan_path: str, out: str, trace: str | None, as_json: bool, no_grad_check: bool,
                   calibrate: bool, **options) -> None:
    """Replay PLAN as a pipeline-parallel training step (one process per pipeline rank, or
    under torchrun) and report measured step time, MFU and prediction error."""
    from planner.api import load_plan
    from planner.cli.common import echo_json
    from planner.core.outputs import write_files_atomic
    from planner.replay import ReplayFailed, ReplayOptions, replay_interleaved
    from planner.replay.predict import replay_calibrated
    from planner.replay.device import recorded_profile
    from planner.replay.report import text_summary

    check_outputs({"--out": out, "--trace": trace}, inputs=[plan_path, options["profile"]])
    if calibrate and options["torch_profile"]:
        raise click.UsageError("--torch-profile records one plan's steps; run it without --calibrate")
    if options["torch_profile"]:  # the ranks may start elsewhere
        options["torch_profile"] = os.path.abspath(options["torch_profile"])
    from planner.simulation import require_valid

    plan = require_valid(load_plan(plan_path), "replayed")
    options["modules"] = options["modules"] or str(plan.costs.get("modules") or "native")  # the code the profile timed
    if options["profile"] is None:  # the profile the plan was made from, for its CPU peak
        options["profile"] = recorded_profile(plan.costs, plan_path)
        check_outputs({"--out": out, "--trace": trace}, inputs=[options["profile"]])
    try:
        results = (replay_calibrated if calibrate else replay_interleaved)(
            [plan], ReplayOptions(grad_check=not no_grad_check, **options))
    except ReplayFailed as exc:
        click.echo(f"error: replay failed: {exc}", err=True)
        fail(3)
    if results is None:  # a torchrun rank other than 0
        return
    result = results[0]
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
