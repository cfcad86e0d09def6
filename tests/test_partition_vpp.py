"""CP-SAT chunk partition (vpp > 1) against brute force, with per-rank memory sums."""

from __future__ import annotations

import pytest

from partition_helpers import all_partitions, random_table
from planner.core.errors import InfeasibleError
from planner.core.placement import stage_ranks
from planner.core.schedule import Action, Schedule
from planner.core.simulate import simulate
from planner.core.stage_costs import stage_costs
from solvers.partition.model import StepModel
from solvers.partition.search import partition_for_schedule
from solvers.schedule.search.search import generate
from solvers.partition.virtual import vpp_partition


def _v_gpipe(pp: int, microbatches: int) -> Schedule:
    """All forwards down the V and back up, then all backwards (V placement, vpp 2)."""
    sched: Schedule = {}
    for r in range(pp):
        down, up = r, 2 * pp - 1 - r
        sched[r] = ([Action(down, "F", m) for m in range(microbatches)]
                    + [Action(up, "F", m) for m in range(microbatches)]
                    + [Action(up, "B", m) for m in range(microbatches)]
                    + [Action(down, "B", m) for m in range(microbatches)])
    return sched


@pytest.mark.parametrize("placement", ["loop", "v"])
@pytest.mark.parametrize("seed", range(4))
def test_cp_sat_is_optimal_for_the_estimate_under_rank_memory(placement, seed):
    n, pp, vpp = 9, 2, 2
    table = random_table(seed, n)
    sched = generate("interleaved", pp=pp, vpp=vpp, microbatches=4) if placement == "loop" else _v_gpipe(pp, 4)
    ranks = stage_ranks(pp * vpp, pp, placement)
    model = StepModel(table, sched, ranks)
    splits = list(all_partitions(n, pp * vpp))
    peaks = sorted(max(model.rank_memory(p).values()) for p in splits)
    limit = peaks[len(peaks) // 4]
    ok = [p for p in splits if max(model.rank_memory(p).values()) <= limit]
    res = vpp_partition(model, memory_limit_bytes=limit, time_limit_s=5.0, gap_limit=0.0)
    assert res.status == "OPTIMAL"
    assert res.estimate_s == pytest.approx(min(model.estimate(p) for p in ok), rel=1e-5)
    sim = simulate(sched, stage_costs(table, res.bounds, ranks))
    assert max(sim.peak_memory_bytes) <= limit


def test_cp_sat_respects_pins():
    table = random_table(1, 10)
    sched = generate("interleaved", pp=2, vpp=2, microbatches=4)
    model = StepModel(table, sched, [0, 1, 0, 1])
    res = vpp_partition(model, memory_limit_bytes=None, cuts={1: 2, 3: 9})
    assert res.bounds[0] == (0, 2) and res.bounds[-1] == (9, 10)


def test_impossible_memory_names_rank_bytes_and_knobs():
    table = random_table(2, 10)
    sched = generate("interleaved", pp=2, vpp=2, microbatches=4)
    with pytest.raises(InfeasibleError, match=r"rank \d .* GiB needed .* vs 1\.00 GiB available; "
                                              r"use more stages \(--pp\).*recomputation"):
        partition_for_schedule(table, sched, pp=2, vpp=2, memory_limit_bytes=1 << 30)


def test_same_inputs_same_partition():
    table = random_table(5, 14)
    sched = generate("interleaved", pp=2, vpp=3, microbatches=6)
    runs = [partition_for_schedule(table, sched, pp=2, vpp=3, memory_limit_bytes=None, seed=3).candidates
            for _ in range(2)]
    assert runs[0] == runs[1]
