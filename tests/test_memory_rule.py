"""One memory rule: every candidate the planner accepts passes the validator's memory check
(the simulated peak against the plan's limit in bytes), and infeasibility is claimed only
when proven ([Note: one memory rule] in solvers.schedule.engines.memory_limit)."""

from __future__ import annotations

import random

import pytest

from cost_tables import GIB, spread, write_stage_table
from planner.core.costs import P2PCost
from planner.core.errors import InfeasibleError
from planner.core.plan import load_plan_file
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from planner.core.validate import validate
from planner.simulation import validate_plan
from solvers.schedule.search.candidates import limits
from solvers.schedule.engines.list_scheduler import list_schedule
from solvers.schedule.engines.memory_limit import MemoryLimit
from solvers.schedule.search.search import best_schedule


def _spread_table(tmp_path):
    """p 8, F/I/W 1/1/1.5 ms spread 30% across the stages, P2P 0.1 ms, 1 GiB per microbatch."""
    return write_stage_table(tmp_path / "spread.json", f=1e-3, i=1e-3, w=1.5e-3, factors=spread(8, 0.3))


def _valid_plan(tmp_path, out: str = "plan.json"):
    plan = load_plan_file(tmp_path / out)
    assert validate_plan(plan) == []
    return plan


@pytest.mark.parametrize("schedule,limit", [("auto", "4microbatches"), ("cpsat", "4microbatches"), ("auto", "4GiB")])
def test_a_limit_below_every_family_still_plans(ppplan, tmp_path, schedule, limit):
    # 4 microbatches on rank 0: below 1F1B's and ZB-H1's 8, ZB-H2's 15; the greedy order fits
    table = _spread_table(tmp_path)
    result = ppplan("plan", "--profile", str(table), "--pp", "8", "--microbatches", "32",
                    "--memory-limit", limit, "--schedule", schedule, "--work", "0.5", "--quiet")
    assert result.code == 0, result.err
    plan = _valid_plan(tmp_path)
    pred = plan.predicted
    assert max(pred["peak_memory_bytes"]) <= pred["memory_limit_bytes"] == 4 * GIB
    assert pred["step_time_s"] < 0.19  # the greedy list scheduler alone: 182.9 ms


@pytest.mark.parametrize("schedule", ["dualpipev-list", "dualpipev"])
@pytest.mark.parametrize("limit", ["4.5", "8.5", "16.5"])
def test_dualpipev_plans_fit_their_limit(ppplan, tmp_path, schedule, limit):
    table = _spread_table(tmp_path)
    result = ppplan("plan", "--profile", str(table), "--pp", "4", "--vpp", "2", "--placement", "v",
                    "--microbatches", "32", "--memory-limit", f"{limit}microbatches", "--schedule", schedule,
                    "--work", "0.5", "--quiet")
    if result.code == 2:  # the named family (W moved or not) cannot fit: said as such
        assert "no schedule meets the limits" in result.err and schedule in result.err
        return
    assert result.code == 0, result.err
    _valid_plan(tmp_path)


def test_below_one_microbatch_per_stage_is_proven_infeasible(ppplan, tmp_path):
    table = _spread_table(tmp_path)
    result = ppplan("plan", "--profile", str(table), "--pp", "8", "--microbatches", "32",
                    "--memory-limit", "0.5GiB", "--work", "0.5", "--quiet")
    assert result.code == 2, result.err
    assert "1 microbatches in flight" in result.err and "512.00 MiB" in result.err
    assert not (tmp_path / "plan.json").exists()


def _hetero(seed: int) -> StageCosts:
    rnd = random.Random(seed)
    p = 4
    act = [rnd.randrange(1, 9) * 2**20 for _ in range(p)]
    return StageCosts(f=tuple(rnd.uniform(0.5, 1.5) for _ in range(p)), i=(1.0,) * p, w=(0.5,) * p,
                      act_bytes=tuple(act), act_w_bytes=tuple(a // 3 for a in act),
                      static_bytes=tuple(rnd.randrange(0, 64) * 2**20 for _ in range(p)),
                      out_bytes=(0,) * p, ranks=tuple(range(p)), p2p=P2PCost(latency_s=0.0))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("limit", [MemoryLimit(microbatches=2.5), MemoryLimit(bytes=80 * 2**20),
                                   MemoryLimit(bytes=80 * 2**20, microbatches=3)], ids=str)
def test_the_search_budget_is_the_validators_limit(seed, limit):
    costs = _hetero(seed)
    budget, cap = limit.activation_limit(costs), limit.per_gpu_bytes(costs)
    static = costs.static_per_rank()
    assert [b + s for b, s in zip(budget, static)] == [cap] * costs.num_ranks
    for cut in (None, 1, 2):  # schedules holding more or less than the budget
        b = budget if cut is None else [cut * a for a in costs.act_bytes]
        sched = list_schedule(costs, 8, activation_limit=b).schedule
        t, _ = limits(sched, costs, budget, {})
        over = validate(sched, costs, num_microbatches=8, memory_limit_bytes=cap)
        assert (t is not None) == (not over) == limit.fits(costs, simulate(sched, costs).peak_memory_bytes)


def test_memory_messages_show_small_numbers(make_costs):
    from planner.core.units import format_bytes

    costs = make_costs(4, f=1e-3, i=1e-3, w=1e-3, act=3 << 20, act_w=1 << 20)
    with pytest.raises(InfeasibleError, match=r"3\.00 MiB"):
        best_schedule(costs, microbatches=8, memory_limit=MemoryLimit(bytes=2 << 20))
    assert [format_bytes(n) for n in (512, 3 << 20, 3 * GIB // 2, 5 << 40)] == \
        ["512 B", "3.00 MiB", "1.50 GiB", "5.00 TiB"]


@pytest.mark.parametrize("limit_gib", [10, 12, 14, 16, 20])
def test_the_chunk_partition_counts_transient_bytes(tmp_path, limit_gib):
    from planner.core.costs_io import load_costs
    from planner.core.stage_costs import stage_costs
    from solvers.partition.search import partition_for_schedule
    from solvers.schedule.families.generators import interleaved_1f1b

    n = 12  # the loss's transient buffer (work_bytes) sits on the head, the last layer
    path = write_stage_table(tmp_path / "t.json", f=1e-3, i=1e-3, w=1e-3, factors=[1.0] * (n - 1) + [3.0],
                             work_bytes=[0] * (n - 1) + [6 * GIB])
    table = load_costs(path)
    sched = interleaved_1f1b(2, 2, 8)
    limit = limit_gib * GIB
    try:
        res = partition_for_schedule(table, sched, pp=2, vpp=2, memory_limit_bytes=limit, time_limit_s=2.0)
    except InfeasibleError:
        return
    for bounds in res.candidates:
        peaks = simulate(sched, stage_costs(table, bounds, [0, 1, 0, 1])).peak_memory_bytes
        assert max(peaks) <= limit, (bounds, [p / GIB for p in peaks])


def test_w_filling_keeps_a_fused_pair_whole_where_its_split_would_not_fit():
    """A split pair (F;I) holds its W's share past the pair; at the limit the whole (F;B)
    order meets, W filling keeps such pairs whole instead of giving up."""
    from schedule_fixtures import make_costs
    from planner.core.schedule import OVERLAP, ActionKind
    from solvers.schedule.families.registry import generate
    from solvers.schedule.engines.w_fill import fill_w

    costs = make_costs(4, fused_share=0.8)
    sched = generate("1f1b-overlap", pp=4, vpp=1, microbatches=8)
    static = costs.static_per_rank()
    limit = [p - s for p, s in zip(simulate(sched, costs).peak_memory_bytes, static)]

    def whole_pairs(s):
        return sum(a.kind == OVERLAP and a.sub[1].kind == ActionKind.B for row in s.values() for a in row)

    free = fill_w(sched, costs)
    assert free is not None and whole_pairs(free) == 0  # no limit: every pair split
    tight = fill_w(sched, costs, activation_limit=limit)
    assert tight is not None and whole_pairs(tight) > 0
    peaks = [p - s for p, s in zip(simulate(tight, costs).peak_memory_bytes, static)]
    assert all(p <= lim for p, lim in zip(peaks, limit))
