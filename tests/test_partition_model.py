"""The schedule-aware step estimate and memory model against the simulator."""

from __future__ import annotations

from dataclasses import replace

import pytest

from partition_helpers import all_partitions, random_table, uniform_table
from planner.core.simulate import simulate
from planner.core.stage_costs import stage_costs
from solvers.partition.inflight import max_in_flight, memory_points
from solvers.partition.ranges import minmax_partition
from solvers.partition.model import StepModel, stage_shapes
from solvers.partition.search import partition_for_schedule
from solvers.schedule.search.search import generate


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "1f1b-overlap"])
@pytest.mark.parametrize("stages, microbatches, per", [(4, 8, 2), (3, 5, 1), (2, 7, 3), (4, 16, 1)])
def test_estimate_equals_simulation_on_equal_stages(name, stages, microbatches, per):
    table = replace(uniform_table(stages * per), pairs={("x", "x"): 2.2e-3})
    sched = generate(name, pp=stages, vpp=1, microbatches=microbatches)
    bounds = [(k * per, (k + 1) * per) for k in range(stages)]
    ranks = list(range(stages))
    model = StepModel(table, sched, ranks)
    assert model.estimate(bounds) == pytest.approx(simulate(sched, stage_costs(table, bounds, ranks)).step_time)


def test_estimate_is_the_textbook_formula_for_1f1b():
    table = uniform_table(8, f=1e-3, i=2e-3, w=1e-3)
    sched = generate("1f1b", pp=4, vpp=1, microbatches=6)
    model = StepModel(table, sched, [0, 1, 2, 3])
    per_stage = 2 * (1e-3 + 2e-3 + 1e-3)
    assert model.estimate([(0, 2), (2, 4), (4, 6), (6, 8)]) == pytest.approx((6 + 4 - 1) * per_stage)


@pytest.mark.parametrize("name", ["1f1b", "1f1b-overlap", "gpipe"])
@pytest.mark.parametrize("seed", range(4))
def test_memory_model_is_the_simulators_peak(name, seed):
    table = random_table(seed, 9)
    sched = generate(name, pp=3, vpp=1, microbatches=5)
    model = StepModel(table, sched, [0, 1, 2])
    for bounds in list(all_partitions(9, 3))[::3]:
        sim = simulate(sched, stage_costs(table, bounds, [0, 1, 2]))
        assert [model.stage_memory(s, a, b) for s, (a, b) in enumerate(bounds)] == sim.peak_memory_bytes
        assert list(model.rank_memory(bounds).values()) == sim.peak_memory_bytes


def test_memory_points_of_interleaved_match_simulated_rank_peaks():
    table = random_table(7, 12)
    sched = generate("interleaved", pp=2, vpp=2, microbatches=4)
    ranks = [0, 1, 0, 1]
    model = StepModel(table, sched, ranks)
    bounds = [(0, 2), (2, 5), (5, 9), (9, 12)]
    sim = simulate(sched, stage_costs(table, bounds, ranks))
    assert [model.rank_memory(bounds)[r] for r in (0, 1)] == sim.peak_memory_bytes
    assert set(memory_points(sched)) == {0, 1}


def test_stage_shapes_count_fused_pairs_and_warmup():
    sched = generate("1f1b-overlap", pp=3, vpp=1, microbatches=8)
    shapes = stage_shapes(sched, 3)
    assert [sh.warmup for sh in shapes] == [5, 3, 1]
    assert all(sh.f + sh.fused_f == 8 and sh.b + sh.fused_i == 8 for sh in shapes)
    # a fused step frees its backward before its forward allocates (Megatron's combined
    # 1F1B, layer by layer): no more in flight than the warm-up's forwards
    assert max_in_flight(sched, 3) == [5, 3, 1]


@pytest.mark.parametrize("name", ["1f1b", "1f1b-overlap"])
@pytest.mark.parametrize("seed", range(6))
def test_dp_is_optimal_for_the_estimate_under_memory(name, seed):
    """DP optimum of the step estimate (with exact memory limits) vs brute force."""
    n, S = 9, 3
    table = random_table(seed, n)
    sched = generate(name, pp=S, vpp=1, microbatches=6)
    model = StepModel(table, sched, list(range(S)))
    peaks = sorted(max(model.rank_memory(p).values()) for p in all_partitions(n, S))
    limit = peaks[len(peaks) // 3]  # binds: two thirds of the splits do not fit
    ok = [p for p in all_partitions(n, S) if max(model.rank_memory(p).values()) <= limit]
    got = partition_for_schedule(table, sched, pp=S, memory_limit_bytes=limit).candidates
    assert model.estimate(got[0]) == pytest.approx(min(model.estimate(p) for p in ok))
    assert all(max(model.rank_memory(b).values()) <= limit for b in got)


def test_dp_optimum_is_never_worse_than_the_max_stage_partition_by_estimate():
    table = random_table(3, 12)
    sched = generate("1f1b", pp=4, vpp=1, microbatches=8)
    model = StepModel(table, sched, [0, 1, 2, 3])
    steady = minmax_partition(12, 4, model.work)
    best = minmax_partition(12, 4, model.term)
    assert model.estimate(best) <= model.estimate(steady) + 1e-12


def test_range_max_matches_max_on_every_range():
    import random

    from solvers.partition.ranges import RangeMax

    rng = random.Random(3)
    for n in (0, 1, 2, 7, 33):
        values = [rng.randrange(100) for _ in range(n)]
        rm = RangeMax(values)
        for a in range(n + 1):
            for b in range(a, n + 1):
                assert rm(a, b) == (max(values[a:b]) if b > a else 0)
