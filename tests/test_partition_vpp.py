"""CP-SAT chunk partition (vpp > 1) against brute force, with per-rank memory sums."""

from __future__ import annotations

import pytest

from partition_helpers import all_partitions, random_table, uniform_table
from planner.core.errors import InfeasibleError
from planner.core.placement import stage_ranks
from planner.core.schedule import Action, Schedule
from planner.core.simulate import compile_schedule, simulate
from planner.core.stage_costs import stage_costs
from solvers.partition.model import StepModel
from solvers.partition.search import partition_for_schedule
from solvers.schedule.search.search import generate
from solvers.partition.virtual import vpp_partition
from solvers.partition.virtual_moves import balanced_split, joint_moves, stage_moves


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


@pytest.mark.parametrize("seed", range(3))
def test_balanced_split_is_the_min_max_of_f_plus_b_with_pins(seed):
    table = random_table(seed, 10)
    prefix = [0.0]
    for lc in table.layers:
        prefix.append(prefix[-1] + lc.serial_f + lc.serial_b)
    fixed = {2: 5}
    ok = [p for p in all_partitions(10, 4) if p[2][0] == 5]
    best = min(max(prefix[b] - prefix[a] for a, b in p) for p in ok)
    got = balanced_split(prefix, 0, 10, 0, 4, fixed)
    assert got[2][0] == 5
    assert max(prefix[b] - prefix[a] for a, b in got) == pytest.approx(best)
    assert balanced_split(prefix, 0, 3, 0, 4, {}) is None


def test_joint_moves_start_from_the_balanced_split():
    """Two simulations: the given skewed split, then the balanced F+B split wins at once."""
    table = uniform_table(16)
    sched = generate("interleaved", pp=2, vpp=2, microbatches=4)
    ranks = [0, 1, 0, 1]
    comp = compile_schedule(sched, 4, ranks)
    res = joint_moves(table, comp, [(0, 1), (1, 2), (2, 3), (3, 16)], ranks, max_evaluations=2)
    assert res.bounds == [(0, 4), (4, 8), (8, 12), (12, 16)]
    assert res.evaluated == 2


def test_joint_moves_keep_pins_memory_and_determinism():
    table = random_table(3, 14)
    sched = generate("interleaved", pp=2, vpp=2, microbatches=4)
    ranks = [0, 1, 0, 1]
    comp = compile_schedule(sched, 4, ranks)
    start = [(0, 3), (3, 7), (7, 11), (11, 14)]
    cap = max(simulate(sched, stage_costs(table, start, ranks)).peak_memory_bytes)

    def fits(_costs, peaks):
        return max(peaks) <= cap
    runs = [joint_moves(table, comp, start, ranks, fits=fits, pinned=frozenset({1})) for _ in range(2)]
    assert runs[0] == runs[1]
    res = runs[0]
    assert res.bounds[1][0] == 3
    sim = simulate(sched, stage_costs(table, res.bounds, ranks))
    assert max(sim.peak_memory_bytes) <= cap and sim.step_time == pytest.approx(res.step_time)
    assert res.step_time <= simulate(sched, stage_costs(table, start, ranks)).step_time


@pytest.mark.parametrize("c", range(6))
def test_stage_moves_are_partitions_that_keep_pins(c):
    table = random_table(7, 18)
    prefix = [0.0]
    for lc in table.layers:
        prefix.append(prefix[-1] + lc.serial_f + lc.serial_b)
    bounds = [(0, 3), (3, 6), (6, 9), (9, 12), (12, 15), (15, 18)]
    fixed = {4: 12}
    moves = stage_moves(bounds, c, prefix, fixed)
    assert moves and len({tuple(m) for m in moves}) == len(moves)
    for m in moves:
        assert m[0][0] == 0 and m[-1][1] == 18 and all(a < b for a, b in m)
        assert all(m[k][1] == m[k + 1][0] for k in range(5)) and m[4][0] == 12
        assert m != bounds
    far = [m for m in moves if sum(x != y for x, y in zip(m, bounds)) >= 3]
    assert far or c >= 4  # several boundaries moved at once (but not across the pin)


def test_joint_moves_stop_when_the_work_budget_is_spent():
    """``stop`` (the planner's ``Deadline.expired``) ends the search after the given partition."""
    table = random_table(3, 14)
    sched = generate("interleaved", pp=2, vpp=2, microbatches=4)
    comp = compile_schedule(sched, 4, [0, 1, 0, 1])
    start = [(0, 1), (1, 2), (2, 3), (3, 14)]
    res = joint_moves(table, comp, start, [0, 1, 0, 1], stop=lambda: True)
    assert res.evaluated == 1 and res.bounds == start
    assert joint_moves(table, comp, start, [0, 1, 0, 1]).evaluated > 1
