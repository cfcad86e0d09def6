"""The degree screen's estimate uses the planner's own rules: its partition DP, its stage costs
and the in-flight memory of the schedule the planner runs (so the simulator agrees with it)."""

from __future__ import annotations

import pytest

import solvers.partition.ranges as ranges
from planner.core.cluster import default_cluster_path, load_cluster
from planner.core.hf_config import load_model
from planner.core.placement import stage_ranks
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts, stage_costs
from planner.planning import estimate
from planner.planning.estimate import ScreenWork, estimate_step, inflight_microbatches
from profiler.analytical import analytical_costs
from solvers.partition.inflight import memory_points
from solvers.schedule.families.generators import interleaved_1f1b

SHAPES = [  # (pp, vpp, ep, recompute, EP overlap)
    (4, 1, 4, "selective", False), (4, 1, 4, "selective", True),
    (2, 2, 8, "full", False), (2, 2, 8, "none", True), (1, 1, 16, "none", True)]


def _cluster(pp: int, vpp: int, ep: int, recompute: str):
    base = load_cluster(default_cluster_path("qwen3-30b-a3b"))
    return base.with_parallel(pp=pp, vpp=vpp, tp=1, ep=ep, dp=base.num_gpus // pp).with_recompute(recompute)


@pytest.mark.parametrize("pp, vpp, ep, recompute, overlap", SHAPES)
def test_screen_peak_is_the_simulators_peak_of_the_planners_schedule(pp, vpp, ep, recompute, overlap):
    spec, cluster = load_model("qwen3-30b-a3b"), _cluster(pp, vpp, ep, recompute)
    est = estimate_step(spec, cluster, overlap=overlap)
    table = analytical_costs(spec, cluster, size_curve_sizes=(), pairs=overlap)
    ranks = stage_ranks(pp * vpp, pp, "loop")
    serial = [lc.serial_f + lc.serial_i + lc.w for lc in table.layers]
    assert list(est.bounds) == ranges.weighted_partition(serial, pp * vpp)
    order = interleaved_1f1b(pp, vpp, cluster.microbatches_per_step, fuse=overlap)
    sim = simulate(order, stage_costs(table, list(est.bounds), ranks))
    assert list(est.rank_peak_bytes) == sim.peak_memory_bytes
    assert est.peak_memory_bytes == max(sim.peak_memory_bytes)


def test_screen_calls_the_shared_partition_memory_and_static_rules(monkeypatch):
    calls = {"minmax": 0, "static": 0, "points": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(ranges, "minmax_partition", counted("minmax", ranges.minmax_partition))
    monkeypatch.setattr(StageCosts, "static_per_rank", counted("static", StageCosts.static_per_rank))
    monkeypatch.setattr(estimate, "memory_points", counted("points", estimate.memory_points))
    estimate_step(load_model("qwen3-30b-a3b"), _cluster(4, 1, 4, "selective"), overlap=False, screen=ScreenWork())
    assert calls["minmax"] >= 1 and calls["static"] >= 1 and calls["points"] >= 1
    assert not hasattr(estimate, "even_partition") and not hasattr(estimate, "_rank_memory")


@pytest.mark.parametrize("fuse", [False, True])
@pytest.mark.parametrize("pp, vpp", [(1, 1), (2, 1), (3, 1), (5, 1), (2, 2), (3, 2), (4, 3), (2, 4)])
def test_in_flight_counts_of_a_shortened_schedule_are_the_full_schedules(pp, vpp, fuse):
    """The screen reads in-flight counts off a schedule of ``inflight_microbatches`` microbatches:
    after the warm-up they repeat, so the Pareto points are those of the whole step."""
    for m in range(pp, 12 * pp + 1, pp):
        short = inflight_microbatches(pp, vpp, m)
        assert short <= m and short % pp == 0
        assert memory_points(interleaved_1f1b(pp, vpp, short, fuse=fuse)) == \
            memory_points(interleaved_1f1b(pp, vpp, m, fuse=fuse)), m


def test_weighted_partition_shares_one_table_and_keeps_the_dps_answer():
    import random

    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 30)
        stages = rng.randint(1, n)
        weights = [rng.choice([1.0, 2.0, rng.random()]) for _ in range(n)]
        p = ranges.prefix_sums(weights)
        assert ranges.weighted_partition(weights, stages) == \
            ranges.minmax_partition(n, stages, lambda s, a, b: p[b] - p[a]), (weights, stages)


@pytest.mark.parametrize("fsdp", [False, True])
def test_static_prefilter_is_the_cost_tables_rule(fsdp: bool) -> None:
    """The screen's static-bytes prefilter (before any cost table) is the tables' own rule
    (``profiler.analytical.state_bytes``) averaged over the pipeline ranks, FSDP included."""
    from dataclasses import replace

    from planner.planning.degrees import _static_bytes

    spec, base = load_model("qwen3-30b-a3b"), _cluster(4, 1, 4, "selective")
    c = replace(base, training=replace(base.training, fsdp=fsdp))
    table = analytical_costs(spec, c, size_curve_sizes=(), pairs=False)
    assert _static_bytes(spec, c) == pytest.approx(sum(lc.static_bytes for lc in table.layers) / 4, rel=1e-6)
