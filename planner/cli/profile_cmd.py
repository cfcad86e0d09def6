"""``ppplan profile``: write a cost table, measured on this device or analytical; or compare two."""

from __future__ import annotations

import dataclasses
import os

import click

from planner.cli.common import SEED_MAX, FiniteFloat, check_outputs

__all__ = ["COMMANDS"]


@click.command("profile")
@click.argument("model", required=False)
@click.option("--analytical", is_flag=True, help="Compute costs from the GPU preset instead of measuring.")
@click.option("--cluster", type=click.Path(dir_okay=False), help="Cluster YAML for --analytical and for the analytical fill of --from-trace (default: the model's own).")
@click.option("--device", default="cpu", show_default=True, help="Where to measure: cpu or cuda.")
@click.option("--scale", type=FiniteFloat(min=0, max=1, min_open=True), default=1 / 16, show_default=True, help="Width of the measured layers relative to the model (0 < F <= 1).")
@click.option("--ep", type=click.IntRange(min=1, max=1024), default=1, show_default=True, help="Expert-parallel processes exchanging tokens with real all-to-alls.")
@click.option("--groups", type=click.IntRange(min=1, max=1024), default=1, show_default=True, help="Expert-parallel groups of --ep processes measuring their own copies of the layers at once, samples pooled across groups (--ep x --groups processes; e.g. --groups 2 at --pp 2, as a replay's stages each run their own group at the same time).")
@click.option("--routing", "routing", multiple=True, type=click.Path(dir_okay=False), help="Tokens-per-expert trace(s) for the routing imbalance (default: the routers on sample tokens).")
@click.option("--trace-ep", type=click.IntRange(min=1, max=1 << 16), help="Expert-parallel size the --routing trace was recorded with (default: --ep); its busiest-rank factors are applied.")
@click.option("--seq-len", type=click.IntRange(min=1, max=1 << 20), default=256, show_default=True, help="Tokens per sequence.")
@click.option("--micro-batch", type=click.IntRange(min=1, max=1 << 12), default=1, show_default=True, help="Sequences per microbatch.")
@click.option("--warmup", type=click.IntRange(min=0, max=1000), default=1, show_default=True, help="Untimed runs per measurement.")
@click.option("--repeats", type=click.IntRange(min=1, max=1000), default=5, show_default=True, help="Timed runs per measurement (median and spread).")
@click.option("--no-links", is_flag=True, help="Skip the point-to-point / all-to-all benchmarks (no second process when --ep is 1).")
@click.option("--threads", type=click.IntRange(min=0, max=1024), default=0, show_default=True, help="torch threads per process (0: automatic).")
@click.option("--alone", is_flag=True, help="With --ep 1, time on one process while the other only joins the link benchmark (default: both measure at once and their samples are pooled, as a replay's ranks all compute at once; not with --groups above 1).")
@click.option("--seed", type=click.IntRange(min=0, max=SEED_MAX), default=0, show_default=True, help="Random seed of the sample weights, tokens and routers (0 .. 2^63-1).")
@click.option("--moe-expert-capacity-factor", type=FiniteFloat(min=0, min_open=True, max=1e6), help="Measure in Megatron's capacity mode: each expert takes at most ceil(tokens x top_k / experts x C) copies of a rank's tokens, the rest dropped (default: dropless).")
@click.option("--moe-pad-expert-input-to-capacity", is_flag=True, help="Pad every expert's buffer to capacity: static all-to-all splits, no host sync in a MoE layer (needs --moe-expert-capacity-factor).")
@click.option("--moe-token-drop-policy", type=click.Choice(["probs", "position"]), default="probs", show_default=True, help="Which copies over capacity are dropped: probs (lowest routing weight) or position (latest tokens).")
@click.option("--modules", type=click.Choice(["transformers", "native"]), default=None, help="Layer modules to measure: transformers (the model family's own classes; needs ppplan[hf]) or native (ppplan's re-implementations). Default: transformers when installed, native with the capacity flags (only the native modules implement capacity mode).")
@click.option("--from-trace", "from_trace", type=click.Path(), help="Folder of PyTorch profiler traces (one per rank, .json or .json.gz) of your own run: costs from them, the rest analytical (docs/trace-import.md).")
@click.option("--model", "model_opt", help="With --from-trace: the model the run trained (default: the one the traces record).")
@click.option("--compare", nargs=2, type=click.Path(dir_okay=False), help="Show two profiles side by side per layer type and exit.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--out", type=click.Path(dir_okay=False), default="profile.json", show_default=True, help="Cost table JSON to write (read by ppplan plan --profile).")
def profile_command(model: str | None, analytical: bool, cluster: str | None, device: str, scale: float,
                    ep: int, groups: int, routing: tuple[str, ...], trace_ep: int | None, seq_len: int, micro_batch: int, warmup: int,
                    repeats: int, no_links: bool, threads: int, alone: bool, seed: int, modules: str | None,
                    compare: tuple[str, str] | None, quiet: bool, out: str, from_trace: str | None,
                    model_opt: str | None, **moe_capacity) -> None:
    """Write MODEL's cost table (measured unless --analytical), or --compare A B, or --from-trace DIR."""
    from planner.core.costs_io import load_costs, save_costs
    from planner.core.hf_config import load_model

    if from_trace is not None:
        from planner.from_trace import profile_from_trace

        if analytical or compare:
            raise click.UsageError("--from-trace builds the table from traces; drop --analytical / --compare")

        check_outputs({"--out": out}, inputs=[cluster])
        table = profile_from_trace(from_trace, model=model_opt or model, cluster=cluster)
        save_costs(table, out)
        trace = table.meta["trace"]
        click.echo(f"wrote {out}: {table.num_layers} layers from {trace['ranks']} rank trace(s) "
                   f"({', '.join(trace['clock'])} clock, scale {table.scale:g}); other fields analytical")
        return

    if not compare:
        check_outputs({"--out": out}, inputs=[cluster, *routing, model if model and os.path.isfile(model) else None])
    if compare:
        from profiler.compare import render_comparison

        tables = [load_costs(path) for path in compare]
        click.echo(render_comparison(*tables, names=_names(tables)))
        return
    if model is None:
        raise click.UsageError("missing MODEL (a shipped id or a config.json path)")
    spec = load_model(model)
    if analytical:
        from dataclasses import replace

        from planner.core.cluster_resolve import resolve_cluster
        from profiler.analytical import analytical_costs
        from profiler.layers.moe_capacity import capacity_mode

        cl = resolve_cluster(spec, cluster)
        mode = capacity_mode(moe_capacity["moe_expert_capacity_factor"],
                             pad=moe_capacity["moe_pad_expert_input_to_capacity"],
                             drop_policy=moe_capacity["moe_token_drop_policy"])
        if mode is not None:  # the flags as the cluster file's training fields (profiler.analytical.capacity_load)
            cl = replace(cl, training=replace(cl.training, moe_expert_capacity_factor=mode.factor,
                                              moe_pad_expert_input_to_capacity=mode.pad)).check()
        table = analytical_costs(spec, cl, imbalance=_trace_factors(routing, spec, trace_ep or cl.parallel.ep))
    else:
        table = _measure(spec, device=device, scale=scale, ep=ep, groups=groups, routing=routing, trace_ep=trace_ep, seq_len=seq_len,
                         micro_batch=micro_batch, warmup=warmup, repeats=repeats, threads=threads,
                         concurrent=not alone, measure_links=not no_links, modules=modules or _default_modules(moe_capacity),
                         model_config=_config_of(model), seed=seed, quiet=quiet, **moe_capacity)
    save_costs(table, out)
    click.echo(f"wrote {out}: {table.num_layers} layers, {len(table.pairs)} pair costs "
               f"({table.source}, {table.device}, scale {table.scale:g})")


def _trace_factors(routing: tuple[str, ...], spec, ep: int) -> list[float] | None:
    """With --analytical, the --routing traces' busiest-rank factor per layer (None: no trace)."""
    if not routing:
        return None
    from profiler.routing import layer_factors, load_routing

    return layer_factors(load_routing(list(routing), spec, ep=ep), spec)


def _default_modules(moe_capacity: dict) -> str:
    from profiler.hf import available

    capacity = moe_capacity["moe_expert_capacity_factor"] is not None or moe_capacity["moe_pad_expert_input_to_capacity"]
    return "transformers" if available() and not capacity else "native"


def _config_of(model: str) -> dict:
    from planner.core.hf_config import resolve_model_path
    from planner.core.jsonio import read_json

    return read_json(resolve_model_path(model), what="model config")


def _names(tables: list) -> tuple[str, str]:
    """Column names for --compare: A / B, with each profile's module source when recorded."""
    sources = [t.meta.get("modules", {}).get("source") if isinstance(t.meta, dict) else None for t in tables]
    return tuple(f"{k} ({s})" if s else k for k, s in zip("AB", sources))


def _measure(spec, *, routing: tuple[str, ...], trace_ep: int | None, quiet: bool, **options):
    from planner.progress import progress, set_quiet
    from profiler.measure_launch import ProfilingError
    from profiler.measured import ProfileRequest, check_request, measured_costs

    req = ProfileRequest(**options)
    check_request(spec, req)
    if routing:
        from profiler.routing import load_routing

        summary = load_routing(list(routing), spec, ep=trace_ep or req.ep)
        req = dataclasses.replace(req, imbalance=summary.imbalance,
                                  routing_source=f"{', '.join(routing)} (EP {trace_ep or req.ep})")
    set_quiet(quiet)
    with progress("profiling") as bar:
        def report(label: str, done: int, total: int) -> None:
            bar.total = total
            bar.set_phase(f"measured {label}")
            bar.set(done)

        try:
            return measured_costs(spec, req, progress=report)
        except ProfilingError as exc:
            raise click.ClickException(str(exc)) from None


COMMANDS = [profile_command]
