"""The memory repair of a chunk partition (vpp > 1): what the search falls back to when
CP-SAT's budget runs out before any partition that fits, so a budget that ran out does not
refuse a plan a feasible split exists for."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from partition_helpers import all_partitions, random_table
from planner.api import plan
from planner.core.errors import BudgetExhausted, InfeasibleError
from planner.core.placement import stage_ranks
from planner.core.simulate import simulate
from planner.core.stage_costs import stage_costs
from profiler.cost_model.fitted import FITTED, using_constants
from solvers.partition import search
from solvers.partition.memory_repair import repair_memory
from solvers.partition.model import StepModel
from solvers.partition.ranges import minmax_partition
from solvers.partition.search import partition_for_schedule
from solvers.schedule.search.search import generate

N, PP, VPP = 10, 2, 3


def _case(seed: int, share: float):
    """A random table under interleaved pp 2 vpp 3 and the cap that ``share`` of its splits fit."""
    table = random_table(seed, N)
    sched = generate("interleaved", pp=PP, vpp=VPP, microbatches=6)
    ranks = stage_ranks(PP * VPP, PP, "loop")
    model = StepModel(table, sched, ranks)
    peaks = sorted(max(model.rank_memory(p).values()) for p in all_partitions(N, PP * VPP))
    return table, sched, ranks, model, peaks[int(share * (len(peaks) - 1))]


def _lean(model: StepModel):
    return minmax_partition(N, PP * VPP, model.stage_memory)


@pytest.mark.parametrize("seed", [0, 1, 5, 7, 9])
def test_repair_fits_every_rank_where_the_stage_balanced_split_does_not(seed):
    table, sched, ranks, model, limit = _case(seed, 0.05)
    lean = _lean(model)
    assert max(model.rank_memory(lean).values()) > limit  # each stage balanced, a rank over its cap
    got = repair_memory(model, lean, (limit,) * PP)
    assert got is not None and got != lean
    assert all(b > a for a, b in got) and got[-1][1] == N and got[0][0] == 0
    assert max(simulate(sched, stage_costs(table, got, ranks)).peak_memory_bytes) <= limit  # the simulator agrees


def test_repair_keeps_pinned_boundaries():
    _, _, _, model, limit = _case(2, 0.1)
    lean = _lean(model)
    free = repair_memory(model, lean, (limit,) * PP)
    assert free is not None and free[1][0] != lean[1][0]  # unpinned, the repair moves boundary 1
    got = repair_memory(model, lean, (limit,) * PP, frozenset({1}))
    assert got is not None and got[1][0] == lean[1][0]
    assert max(model.rank_memory(got).values()) <= limit


def test_repair_gives_up_below_every_split_and_proves_nothing():
    _, _, _, model, limit = _case(0, 0.0)
    assert repair_memory(model, _lean(model), (limit - 1,) * PP) is None


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_search_plans_from_the_repair_when_cp_sat_runs_out(seed):
    table, sched, _, model, limit = _case(seed, 0.05)
    res = partition_for_schedule(table, sched, pp=PP, vpp=VPP, memory_limit_bytes=limit, time_limit_s=1e-9)
    assert (res.solver, res.status, res.fits_memory) == ("repair", "FEASIBLE", True)
    assert max(model.rank_memory(res.candidates[0]).values()) <= limit


def test_without_the_repair_the_same_search_ran_out(monkeypatch):
    """The case above is one CP-SAT's budget alone does not solve: the repair is what plans it."""
    table, sched, _, _, limit = _case(0, 0.05)
    monkeypatch.setattr(search, "repair_memory", lambda *a, **k: None)
    with pytest.raises(BudgetExhausted, match="not proven infeasible"):
        partition_for_schedule(table, sched, pp=PP, vpp=VPP, memory_limit_bytes=limit, time_limit_s=1e-9)


ROW = Path(__file__).resolve().parents[1] / "benchmarks/data/clusters/mb-26.04-gb200-deepseek-v3-mxfp8-256gpu.yaml"
FOLD = dict(gemm_eff_max=0.6024402652935879, grouped_gemm_eff=1.0, moe_layer_overhead_s=0.0013658651050937286,
            elementwise_eff=0.8)
"""The constants ``benchmarks/published.py --fit`` fitted with the Megatron-Bridge 26.04 rows held
out (run of 2026-12-07 12:21 UTC): under them CP-SAT's screening budget at ``--work 10`` ran out
on this run's pp 4 x vpp 4 before any split that fits its 186 GB GPUs (element-wise work at 0.8
of HBM bandwidth, as the model then had it)."""


@pytest.mark.slow
def test_a_published_run_at_the_edge_of_memory_plans_within_the_default_work(monkeypatch):
    with using_constants(replace(FITTED, **FOLD)):
        got = plan("deepseek-v3", cluster=str(ROW), target="megatron", work=10)
        assert max(got.predicted["peak_memory_bytes"]) <= got.predicted["memory_limit_bytes"]
        monkeypatch.setattr(search, "repair_memory", lambda *a, **k: None)  # CP-SAT from the DP's start alone
        with pytest.raises(InfeasibleError, match="not proven infeasible"):
            plan("deepseek-v3", cluster=str(ROW), target="megatron", work=10)


def test_cp_sat_starts_from_the_repaired_split_when_the_dp_start_is_over_memory(monkeypatch):
    table, sched, _, model, limit = _case(0, 0.05)
    seen = []
    real = search.vpp_partition

    def spy(model, **kw):
        seen.append(kw["hint"])
        return real(model, **kw)
    monkeypatch.setattr(search, "vpp_partition", spy)
    res = partition_for_schedule(table, sched, pp=PP, vpp=VPP, memory_limit_bytes=limit, time_limit_s=5.0)
    assert max(model.rank_memory(seen[0]).values()) <= limit  # the warm start fits
    assert seen[0] in res.candidates  # and is simulated beside CP-SAT's answer
    assert model.estimate(res.candidates[0]) <= model.estimate(seen[0]) + 1e-9
