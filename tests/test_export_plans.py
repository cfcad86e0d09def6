"""Plans the export, plot and API tests share: shipped defaults and hand-built shapes.

Hand-built plans put a schedule from ``solvers.schedule.families.generators`` (or a small transform of one)
on a partition of a real model's analytical costs, so every shape a framework might or
might not express exists regardless of what the planner's search picks today:
uniform, uneven, vpp 2 (loop), V placement, a custom placement, W split (adjacent and
moved), GPipe, fused F&B pairs, MTP layers. Other test files import ``CASES``,
``case_plan`` and ``default_plan`` from here.
"""

from __future__ import annotations

import functools

import pytest

from planner.api import cluster_section, model_section, plan as api_plan, resolve_cluster
from planner.core.hf_config import load_model
from planner.core.placement import stage_ranks
from planner.core.plan import Plan, stage_costs_to_dict
from planner.core.schedule import Action, Schedule, format_schedule
from planner.core.simulate import simulate
from planner.core.stage_costs import stage_costs
from planner.core.validate import validate
from planner.export import LaunchPlan
from solvers.schedule.families.generators import gpipe, interleaved_1f1b, one_f_one_b
from solvers.partition.ranges import uniform_partition

SHIPPED = ("llama3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3")


@functools.lru_cache(maxsize=None)
def default_plan(model: str) -> LaunchPlan:
    """``ppplan plan MODEL`` with its defaults (cached for the session)."""
    return LaunchPlan.of(api_plan(model))


@functools.lru_cache(maxsize=None)
def _table(model: str):
    from profiler.analytical import analytical_costs

    spec = load_model(model)
    cl = resolve_cluster(spec, None)
    return spec, cl, analytical_costs(spec, cl)


def staged_gpipe(ranks: list[int], microbatches: int) -> Schedule:
    """All forwards stage by stage, then all backwards in reverse, on any placement."""
    sched: Schedule = {r: [] for r in sorted(set(ranks))}
    order = sorted(range(len(ranks)))
    for s in order:
        sched[ranks[s]] += [Action(s, "F", m) for m in range(microbatches)]
    for s in reversed(order):
        sched[ranks[s]] += [Action(s, "B", m) for m in range(microbatches)]
    return sched


def defer_w(sched: Schedule) -> Schedule:
    """Every W moved to the end of its rank (zero-bubble-style deferral, order kept)."""
    return {r: [a for a in acts if a.kind != "W"] + [a for a in acts if a.kind == "W"]
            for r, acts in sched.items()}


def build_plan(model: str, *, pp: int, vpp: int = 1, schedule: Schedule,
               bounds: list[tuple[int, int]] | None = None, ranks: list[int] | None = None,
               placement: str = "loop", microbatches: int, name: str) -> LaunchPlan:
    """A schema-checked ``LaunchPlan`` of ``schedule`` on ``bounds`` (default: uniform)."""
    spec, cl, table = _table(model)
    S = pp * vpp
    bounds = bounds or uniform_partition([lc.role for lc in table.layers], S)
    ranks = ranks or stage_ranks(S, pp, placement)
    sc = stage_costs(table, bounds, ranks)
    sim = simulate(schedule, sc)
    plan = Plan(model=model_section(spec, table), cluster=cluster_section(cl),
                parallel={"pp": pp, "vpp": vpp, "tp": cl.parallel.tp, "ep": cl.parallel.ep,
                          "dp": cl.parallel.dp, "placement": placement},
                microbatches={"count": microbatches, "size": 1},
                stages=[{"stage": s, "rank": r, "layers": [a, b]}
                        for s, ((a, b), r) in enumerate(zip(bounds, ranks))],
                schedule=format_schedule(schedule), stage_costs=stage_costs_to_dict(sc),
                predicted={"step_time_s": sim.step_time, "bubble_fraction": sim.bubble_fraction,
                           "mfu": 0.0, "peak_memory_bytes": sim.peak_memory_bytes,
                           "memory_limit_bytes": None},
                baselines={}, solver={"name": name, "schedule": name, "status": "FIXED",
                                      "wall_s": 0.0, "gap": None})
    return LaunchPlan.from_dict(plan.to_dict())


def _cases() -> dict:
    m = 4
    return {
        "uniform": lambda: build_plan("llama3-8b", pp=4, schedule=one_f_one_b(4, m), microbatches=m,
                                      name="1f1b"),
        "uneven": lambda: build_plan("llama3-8b", pp=4, schedule=one_f_one_b(4, m), microbatches=m,
                                     bounds=[(0, 5), (5, 14), (14, 25), (25, 34)], name="1f1b"),
        "vpp2": lambda: build_plan("llama3-8b", pp=2, vpp=2, schedule=interleaved_1f1b(2, 2, m),
                                   microbatches=m, name="interleaved"),
        "v": lambda: build_plan("llama3-8b", pp=2, vpp=2, placement="v", microbatches=m,
                                schedule=staged_gpipe(stage_ranks(4, 2, "v"), m), name="gpipe-v"),
        "custom": lambda: build_plan("llama3-8b", pp=2, ranks=[1, 0], microbatches=m,
                                     schedule=staged_gpipe([1, 0], m), name="gpipe-swapped"),
        "w_adjacent": lambda: build_plan("llama3-8b", pp=4, microbatches=m, name="1f1b-split",
                                         schedule=one_f_one_b(4, m, split_w=True)),
        "w_moved": lambda: build_plan("llama3-8b", pp=4, microbatches=m, name="zb-deferred",
                                      schedule=defer_w(one_f_one_b(4, m, split_w=True))),
        "gpipe": lambda: build_plan("llama3-8b", pp=4, schedule=gpipe(4, m), microbatches=m,
                                    name="gpipe"),
        "fused": lambda: build_plan("qwen3-30b-a3b", pp=2, microbatches=m, name="1f1b-overlap",
                                    schedule=one_f_one_b(2, m, fuse=True)),
        "fused_vpp2": lambda: build_plan("qwen3-30b-a3b", pp=2, vpp=2, microbatches=m, name="interleaved-overlap",
                                         schedule=interleaved_1f1b(2, 2, m, fuse=True)),
        "fused_pp1_split": lambda: build_plan("qwen3-30b-a3b", pp=1, microbatches=m,
                                              name="1f1b-overlap-split",
                                              schedule=one_f_one_b(1, m, fuse=True, split_w=True)),
        "mtp": lambda: build_plan("qwen3-next-80b-a3b", pp=2, schedule=one_f_one_b(2, m),
                                  microbatches=m, name="1f1b"),
    }


CASES = tuple(_cases())


@functools.lru_cache(maxsize=None)
def case_plan(name: str) -> LaunchPlan:
    """The hand-built plan ``name`` (one of ``CASES``), cached."""
    return _cases()[name]()


@pytest.mark.parametrize("name", CASES)
def test_case_is_a_valid_plan(name):
    p = case_plan(name)
    assert validate(p.parsed_schedule(), p.parsed_stage_costs(), num_microbatches=p.num_microbatches) == []
    again = LaunchPlan.from_dict(p.to_dict())
    assert again.schedule == p.schedule and again.stages == p.stages


def test_cases_cover_the_shapes():
    assert case_plan("v").ranks() == [0, 1, 1, 0]
    assert case_plan("vpp2").ranks() == [0, 1, 0, 1]
    assert any(a.kind == "W" for a in case_plan("w_moved").actions(0))
    assert len({b - a for a, b in case_plan("uneven").bounds()}) > 1
    assert "m" in case_plan("mtp").model["layout"]
