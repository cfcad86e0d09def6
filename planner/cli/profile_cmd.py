"""``ppplan profile``: write a cost table (analytical here; measured in profiler/)."""

from __future__ import annotations

import click

__all__ = ["COMMANDS"]


@click.command("profile")
@click.argument("model")
@click.option("--analytical", is_flag=True, help="Compute costs from the GPU preset instead of measuring.")
@click.option("--cluster", type=click.Path(dir_okay=False), help="Cluster YAML (default: the model's own).")
@click.option("--out", type=click.Path(dir_okay=False), default="profile.json", show_default=True)
def profile_command(model: str, analytical: bool, cluster: str | None, out: str) -> None:
    """Write MODEL's cost table."""
    from planner.api import resolve_cluster
    from planner.core.costs_io import save_costs
    from planner.core.hf_config import load_model
    from profiler.analytical import analytical_costs

    if not analytical:
        raise click.UsageError("measured profiling is not available yet; pass --analytical")
    spec = load_model(model)
    table = analytical_costs(spec, resolve_cluster(spec, cluster))
    save_costs(table, out)
    click.echo(f"wrote {out}: {table.num_layers} layers, {len(table.pairs)} pair costs ({table.source}, {table.device})")


COMMANDS = [profile_command]
