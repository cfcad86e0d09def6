"""The partition-free lower bound (solvers.partition.bound) against brute force."""

from __future__ import annotations

import pytest

from partition_helpers import all_partitions, random_table, uniform_table
from planner.core.errors import InfeasibleError
from planner.core.stage_costs import stage_costs
from solvers.schedule.search.lower_bound import step_lower_bound
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.partition.overlap_cost import OverlapRangeCost
from solvers.partition.bound import partition_lower_bound
from solvers.schedule.search.search import best_schedule

GIB = 2 ** 30


def test_range_overlap_matches_the_stage_costs_fused_time():
    """The bound reads a stage's fused F&B time from the range table: the same number the
    simulator's stage costs carry."""
    t = random_table(3, 9)
    rc = OverlapRangeCost(t)
    for bounds in list(all_partitions(9, 3))[:10]:
        sc = stage_costs(t, bounds, [0, 1, 2])
        for s, (a, b) in enumerate(bounds):
            assert rc.overlapped(a, b) == pytest.approx(sc.fused[(s, s)])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("limit_gib", [None, 14.0])
def test_bound_below_every_partition_and_its_best_schedule(seed, limit_gib):
    n, pp, m = 8, 3, 6
    t = random_table(seed, n)
    limit = None if limit_gib is None else int(limit_gib * GIB)
    fastest = lowest = float("inf")
    for bounds in all_partitions(n, pp):
        sc = stage_costs(t, bounds, list(range(pp)))
        mem = None if limit is None else MemoryLimit(bytes=limit)
        budget = None if mem is None else mem.activation_limit(sc)
        if budget is not None and any(b < a for b, a in zip(budget, sc.act_bytes)):
            continue  # one microbatch does not fit: no schedule runs this partition
        lowest = min(lowest, step_lower_bound(sc, m, activation_limit=budget))
        choice = best_schedule(sc, microbatches=m, memory_limit=mem, polish=False)
        fastest = min(fastest, choice.step_time)
    if fastest == float("inf"):  # brute force finds no partition that fits: the bound must say so
        with pytest.raises(InfeasibleError):
            partition_lower_bound(t, pp=pp, microbatches=m, memory_limit_bytes=limit)
        return
    # a feasible partition exists, so the bound must not raise (a wrong "infeasible" fails here)
    pb = partition_lower_bound(t, pp=pp, microbatches=m, memory_limit_bytes=limit)
    assert pb.step_s <= lowest * (1 + 1e-9)  # at most the best partition's own bound
    assert pb.step_s <= fastest * (1 + 1e-9)
    assert pb.step_s > 0.5 * fastest  # and it is not vacuous


def test_uniform_layers_bound_is_the_classic_pipeline():
    """Identical layers, no overlap, free links: the bound is the busiest stage's work plus
    the fill of the stages before it, about what 1F1B takes."""
    t = uniform_table(8)
    pb = partition_lower_bound(t, pp=4, microbatches=8)
    assert [b - a for a, b in pb.bounds] == [2, 2, 2, 2]
    work = 8 * 2 * (1e-3 + 2e-3 + 1e-3)
    assert work <= pb.step_s <= work + 4 * 2 * 3e-3 + 1e-12


def test_memory_no_partition_meets_is_infeasible():
    t = random_table(0, 8)
    with pytest.raises(InfeasibleError, match="one microbatch per stage"):
        partition_lower_bound(t, pp=2, microbatches=4, memory_limit_bytes=1 << 20)
