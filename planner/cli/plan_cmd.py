"""``ppplan plan``: the main job."""

from __future__ import annotations

import click

from planner.cli.common import echo_json
from planner.cli.summary import plan_summary

__all__ = ["COMMANDS"]


@click.command("plan")
@click.argument("model", required=False)
@click.option("--cluster", "cluster", type=click.Path(dir_okay=False), help="Cluster YAML (default: the model's own under examples/clusters/).")
@click.option("--pp", type=click.IntRange(min=1), help="Pipeline-parallel ranks.")
@click.option("--vpp", type=click.IntRange(min=1), help="Virtual stages per rank.")
@click.option("--tp", type=click.IntRange(min=1), help="Tensor-parallel degree.")
@click.option("--ep", type=click.IntRange(min=1), help="Expert-parallel degree.")
@click.option("--dp", type=click.IntRange(min=1), help="Data-parallel replicas (default: GPUs / (pp x tp)).")
@click.option("--gpu", help="GPU preset: h100, h200, h800, a100.")
@click.option("--global-batch", type=click.IntRange(min=1), help="Sequences per step.")
@click.option("--seq-len", type=click.IntRange(min=1), help="Tokens per sequence.")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), help="Activation recomputation.")
@click.option("--microbatches", type=click.IntRange(min=1), help="Microbatches per step (default: per-replica batch).")
@click.option("--memory-gib", type=click.FloatRange(min=0, min_open=True), help="Per-GPU memory limit in GiB (default: GPU memory minus headroom).")
@click.option("--partition", type=click.Choice(["overlap", "serial", "flops", "uniform"]), default="overlap", show_default=True)
@click.option("--schedule", default="auto", show_default=True, help="auto, gpipe, 1f1b, 1f1b-overlap, interleaved.")
@click.option("--placement", type=click.Choice(["loop", "v"]), default="loop", show_default=True)
@click.option("--profile", type=click.Path(dir_okay=False), help="Measured cost table (ppplan profile) instead of the analytical model.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True, help="Seconds for searching solvers.")
@click.option("--out", type=click.Path(dir_okay=False), default="plan.json", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON instead of the summary.")
def plan_command(model: str | None, cluster: str | None, out: str, as_json: bool, **options) -> None:
    """Plan MODEL (a shipped id or config.json; default qwen3-next-80b-a3b) and write the plan JSON."""
    from planner.api import plan

    result = plan(model, cluster=cluster, **options)
    result.save(out)
    if as_json:
        echo_json(result.to_dict())
    else:
        click.echo(plan_summary(result))
        click.echo(f"wrote {out}")


COMMANDS = [plan_command]
