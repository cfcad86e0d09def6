"""A measured full backward B (``LayerCost.b``) from the cost table to the plan:
``planner.core.costs`` [Note: full backward]. torch's one-pass backward costs less than
its split I + W, so a B action must be timed with B, not with I + W."""

from __future__ import annotations

from dataclasses import replace

import pytest

from partition_helpers import random_table, uniform_table
from planner.api import plan
from planner.core.costs import CostTable
from planner.core.costs_io import costs_to_dict, load_costs, save_costs
from planner.core.errors import InputError
from planner.core.jsonio import write_json_atomic
from planner.core.plan import stage_costs_from_dict, stage_costs_to_dict
from planner.core.schedule import OVERLAP, ActionKind
from planner.core.simulate import durations, simulate
from planner.core.stage_costs import stage_costs
from solvers.partition.model import StepModel
from solvers.schedule.search.lower_bound import step_lower_bound
from solvers.schedule.search.search import generate


def _with_b(table: CostTable, ratio: float) -> CostTable:
    """Every layer's full backward at ``ratio`` x its I + W."""
    return replace(table, layers=tuple(replace(lc, b=ratio * (lc.i + lc.w)) for lc in table.layers))


def _costs(table: CostTable, stages: int):
    per = table.num_layers // stages
    bounds = [(k * per, (k + 1) * per) for k in range(stages)]
    return stage_costs(table, bounds, list(range(stages))), bounds


def test_b_actions_take_the_measured_full_backward_and_split_ones_do_not():
    table = replace(uniform_table(8, f=1e-3, i=2e-3, w=1e-3), pairs={("x", "x"): 2.5e-3})
    sc, _ = _costs(_with_b(table, 0.8), 4)
    assert sc.b == pytest.approx((2 * 0.8 * 3e-3,) * 4)
    for name in ("1f1b", "1f1b-overlap", "zb-h1"):
        sched = generate(name, pp=4, vpp=1, microbatches=6)
        sim = simulate(sched, sc)
        dur = durations(sim.compiled, sc)
        for n, a in enumerate(sim.compiled.actions):
            s = a.stage
            if a.kind == ActionKind.B:
                assert dur[n] == pytest.approx(sc.b[s])
            elif a.kind == OVERLAP and a.sub[1].kind == ActionKind.B:
                fs, bs = a.sub[0].stage, a.sub[1].stage
                assert dur[n] == pytest.approx(sc.fused[(fs, bs)] + max(0.0, sc.b[bs] - sc.i[bs]))
            elif a.kind in (ActionKind.I, ActionKind.W):
                assert dur[n] == pytest.approx(sc.i[s] if a.kind == ActionKind.I else sc.w[s])
    split = generate("zb-h1", pp=4, vpp=1, microbatches=6)
    plain, _ = _costs(table, 4)
    assert simulate(split, sc).step_time == pytest.approx(simulate(split, plain).step_time)
    full = generate("1f1b", pp=4, vpp=1, microbatches=6)
    assert simulate(full, sc).step_time == pytest.approx((6 + 3) * 2 * (1e-3 + 0.8 * 3e-3))
    below_i, _ = _costs(_with_b(table, 0.5), 4)  # B under I (noise): the fused pair never gets cheaper
    fused = next(a for acts in generate("1f1b-overlap", pp=4, vpp=1, microbatches=6).values()
                 for a in acts if a.kind == OVERLAP and a.sub[1].kind == ActionKind.B)
    assert below_i.fused_b_time(fused.sub[0].stage, fused.sub[1].stage) == pytest.approx(5e-3)


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "1f1b-overlap"])
@pytest.mark.parametrize("ratio", [0.55, 1.3])
def test_partition_estimate_equals_simulation_with_a_measured_b(name, ratio):
    table = _with_b(replace(uniform_table(8), pairs={("x", "x"): 2.2e-3}), ratio)
    sched = generate(name, pp=4, vpp=1, microbatches=8)
    sc, bounds = _costs(table, 4)
    model = StepModel(table, sched, list(range(4)))
    assert model.estimate(bounds) == pytest.approx(simulate(sched, sc).step_time)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ratio", [0.3, 0.7, 1.2])
def test_lower_bound_stays_below_every_schedule_when_b_differs_from_i_plus_w(seed, ratio):
    table = _with_b(random_table(seed, 8), ratio)
    sc, _ = _costs(table, 4)
    for name in ("gpipe", "1f1b", "1f1b-overlap", "zb-h1", "zb-h2"):
        sched = generate(name, pp=4, vpp=1, microbatches=8)
        assert step_lower_bound(sc, 8) <= simulate(sched, sc).step_time * (1 + 1e-9), name


def test_cost_file_keeps_b_and_rejects_a_bad_one(tmp_path):
    table = _with_b(uniform_table(4), 0.7)
    save_costs(table, tmp_path / "p.json")
    assert [lc.b for lc in load_costs(tmp_path / "p.json").layers] == pytest.approx([lc.b for lc in table.layers])
    assert all("b" not in d for d in costs_to_dict(uniform_table(4))["layers"])  # absent means I + W
    bad = costs_to_dict(table)
    bad["layers"][2]["b"] = -1.0
    write_json_atomic(tmp_path / "bad.json", bad)
    with pytest.raises(InputError, match=r"layers\[2\]\.b|layers.2.*b"):
        load_costs(tmp_path / "bad.json")


def test_plan_stage_costs_keep_b():
    sc, _ = _costs(_with_b(uniform_table(8), 0.6), 4)
    back = stage_costs_from_dict(stage_costs_to_dict(sc), list(sc.ranks))
    assert back.b == pytest.approx(sc.b)
    plain, _ = _costs(uniform_table(8), 4)
    assert "b" not in stage_costs_to_dict(plain) and stage_costs_from_dict(
        stage_costs_to_dict(plain), list(plain.ranks)).b == ()


def test_planner_picks_full_backwards_when_they_are_cheaper(tmp_path):
    """With B = I + W zero-bubble's split wins; with B at 0.6 of it, 1F1B's one-pass B wins."""
    table = uniform_table(8, f=1e-3, i=1e-3, w=1e-3)
    chosen = {}
    for label, t in (("split", table), ("full", _with_b(table, 0.6))):
        save_costs(t, tmp_path / f"{label}.json")
        p = plan(profile=tmp_path / f"{label}.json", pp=4, microbatches=8, work=2)
        kinds = {a.kind for acts in p.parsed_schedule().values() for a in acts for a in a.parts}
        chosen[label] = (kinds, p.predicted.step_time_s)
    assert ActionKind.I in chosen["split"][0] and ActionKind.B not in chosen["split"][0]
    assert ActionKind.B in chosen["full"][0] and ActionKind.I not in chosen["full"][0]
    assert chosen["full"][1] == pytest.approx((8 + 3) * 2 * (1e-3 + 0.6 * 2e-3))
