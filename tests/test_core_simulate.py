"""Simulator facts on cases computable by hand (zero P2P unless stated)."""

from __future__ import annotations

import pytest

from planner.core.costs import P2PCost
from planner.core.meter import WorkMeter
from planner.core.schedule import Action
from planner.core.simulate import (
    DeadlockError,
    compile_schedule,
    simulate,
    simulate_compiled,
)
from planner.core.validate import validate
from solvers.schedule.families.generators import gpipe, interleaved_1f1b, one_f_one_b

SHAPES = [(1, 1), (1, 5), (2, 2), (3, 7), (4, 4), (4, 9), (8, 16)]


@pytest.mark.parametrize("pp, m", SHAPES)
def test_1f1b_uniform_step_time(make_costs, pp, m):
    f, b = 1.0, 2.5
    sim = simulate(one_f_one_b(pp, m), make_costs(pp, f=f, i=b))
    assert sim.step_time == pytest.approx((m + pp - 1) * (f + b))
    assert sim.busy == pytest.approx([m * (f + b)] * pp)
    assert sim.bubble_fraction == pytest.approx((pp - 1) / (m + pp - 1))


@pytest.mark.parametrize("pp, m", SHAPES)
def test_gpipe_uniform_step_time(make_costs, pp, m):
    f, b = 1.0, 2.0
    sim = simulate(gpipe(pp, m), make_costs(pp, f=f, i=b))
    assert sim.step_time == pytest.approx((m + pp - 1) * (f + b))


@pytest.mark.parametrize("pp, m", [(3, 3), (4, 8), (2, 5)])
def test_1f1b_split_w_keeps_w_off_the_stage_chain(make_costs, pp, m):
    # W follows I at once but nothing waits on it across ranks: fill and drain cost (pp-1)(F+I).
    f, i, w = 1.0, 1.5, 0.75
    sim = simulate(one_f_one_b(pp, m, split_w=True), make_costs(pp, f=f, i=i, w=w))
    assert sim.step_time == pytest.approx(m * (f + i + w) + (pp - 1) * (f + i))


@pytest.mark.parametrize("pp, vpp, m", [(2, 2, 4), (4, 2, 8), (4, 3, 8), (3, 2, 6)])
def test_interleaved_bubble_shrinks_by_vpp(make_costs, pp, vpp, m):
    # Megatron interleaved 1F1B: bubble (pp-1)(F+B)/vpp with F, B per rank (Narayanan et al. 2021).
    f, b = 1.0, 2.0
    sim = simulate(interleaved_1f1b(pp, vpp, m), make_costs(pp, vpp, f=f / vpp, i=b / vpp))
    assert sim.step_time == pytest.approx((m + (pp - 1) / vpp) * (f + b))


@pytest.mark.parametrize("pp", [2, 3, 5])
def test_p2p_delay_single_microbatch(make_costs, pp):
    # One microbatch goes down and back up: 2(pp-1) transfers of latency + bytes / bandwidth.
    link = P2PCost(latency_s=0.01, bandwidth=1e9)
    costs = make_costs(pp, f=1.0, i=2.0, out=10**7, p2p=link)
    sim = simulate(one_f_one_b(pp, 1), costs)
    assert costs.p2p_time(0) == pytest.approx(0.02)
    assert sim.step_time == pytest.approx(pp * 3.0 + 2 * (pp - 1) * 0.02)


def test_p2p_delay_only_between_ranks(make_costs):
    link = P2PCost(latency_s=0.5, bandwidth=1e9)
    one_rank = simulate(interleaved_1f1b(1, 3, 2), make_costs(1, 3, f=1.0, i=1.0, p2p=link))
    assert one_rank.step_time == pytest.approx(2 * 3 * 2.0)
    free = simulate(one_f_one_b(4, 8), make_costs(4, f=1.0, i=2.0))
    slow = simulate(one_f_one_b(4, 8), make_costs(4, f=1.0, i=2.0, p2p=link))
    assert slow.step_time > free.step_time + 2 * 3 * 0.5 - 1e-9


@pytest.mark.parametrize("pp, m", [(4, 8), (4, 2), (3, 3)])
def test_memory_peaks(make_costs, pp, m):
    act, static = 100, 1000
    costs = make_costs(pp, f=1.0, i=2.0, act=act, static=static)
    g = simulate(gpipe(pp, m), costs)
    assert g.peak_act_bytes == [m * act] * pp
    o = simulate(one_f_one_b(pp, m), costs)
    assert o.peak_act_bytes == [min(pp - r, m) * act for r in range(pp)]
    assert o.peak_memory_bytes == [static + p for p in o.peak_act_bytes]
    for trace in o.memory:
        assert trace[0] == (0.0, 0) and trace[-1][1] == 0
        assert [t for t, _ in trace] == sorted(t for t, _ in trace)


def test_memory_weight_gradient_share_held_until_w(make_costs):
    # gpipe with split W on one rank: F F I W I W; I frees act - act_w, W frees act_w.
    costs = make_costs(1, f=1.0, i=1.0, w=1.0, act=100, act_w=30)
    sim = simulate(gpipe(1, 2, split_w=True), costs)
    assert [held for _, held in sim.memory[0]] == [0, 100, 200, 130, 100, 30, 0]
    assert [t for t, _ in sim.memory[0]] == [0.0, 0.0, 1.0, 3.0, 4.0, 5.0, 6.0]


def test_fused_action_duration(make_costs):
    costs = make_costs(1, f=1.0, i=2.0, w=0.5, fused={(0, 0): 2.25})
    sched = {0: [Action(0, "F", 0), Action.fused(Action(0, "F", 1), Action(0, "B", 0)),
                 Action(0, "B", 1)]}
    sim = simulate(sched, costs)
    assert sim.end[1] - sim.start[1] == pytest.approx(2.25 + 0.5)
    assert sim.step_time == pytest.approx(1.0 + 2.75 + 2.5)
    assert sim.peak_act_bytes == [0]


def test_the_simulator_and_the_engines_take_durations_and_bytes_from_stage_costs(make_costs):
    """One owner of the cost rules: the simulator's per-node durations and memory changes are
    ``StageCosts.duration``/``allocates``/``frees`` of each action (F, I, W, B, fused pairs)."""
    from dataclasses import replace

    from planner.core.compiled import compile_unordered
    from planner.core.simulate import durations
    from solvers.schedule.families.zero_bubble import zb_h1

    costs = replace(make_costs(2, f=[1.0, 1.5], i=[2.0, 2.5], w=[0.5, 0.25], act=[8, 6], act_w=[3, 2],
                               fused={(0, 0): 2.25, (1, 1): 3.0}), b=(2.25, 2.5))
    scheds = [one_f_one_b(2, 4), one_f_one_b(2, 4, fuse=True), zb_h1(2, 4), gpipe(2, 3),
              {0: [Action(0, "F", 0), Action.fused(Action(0, "F", 1), Action(0, "B", 0)), Action(0, "B", 1)],
               1: [Action(1, "F", 0), Action(1, "I", 0), Action(1, "W", 0), Action(1, "F", 1), Action(1, "B", 1)]}]
    for sched in scheds:
        comp = compile_unordered(sched, costs.num_stages, costs.ranks)
        assert durations(comp, costs) == [costs.duration(a) for a in comp.actions]
        sim = simulate(sched, costs)
        for r, row in sched.items():
            held, peak = 0, 0
            for a in row:
                held += costs.allocates(a)
                peak = max(peak, held)
                held -= costs.frees(a)
            assert held == 0 and sim.peak_act_bytes[r] == peak


def test_critical_path_ends_at_last_action(make_costs):
    costs = make_costs(4, f=[1.0, 2.0, 1.0, 1.5], i=[2.0, 3.0, 2.0, 2.5], w=0.5,
                       p2p=P2PCost(latency_s=0.1, bandwidth=1e12))
    sim = simulate(one_f_one_b(4, 6, split_w=True), costs)
    path = sim.critical_path
    assert sim.end[path[-1]] == sim.step_time
    assert sim.start[path[0]] == 0.0
    for a, b in zip(path, path[1:]):
        assert sim.end[a] <= sim.start[b] + 1e-9
        gap = sim.start[b] - sim.end[a]
        assert gap == pytest.approx(0.0, abs=1e-9) or gap == pytest.approx(0.1)
    assert sim.critical_path_text()[-1] == f"{sim.rank_of[path[-1]]}:{sim.actions[path[-1]]}"


def test_compile_once_retime_many(make_costs):
    sched = interleaved_1f1b(2, 2, 4, split_w=True)
    comp = compile_schedule(sched, 4, (0, 1, 0, 1))
    for scale in (1.0, 2.0, 0.5):
        costs = make_costs(2, 2, f=scale, i=2 * scale, w=scale / 2)
        assert simulate_compiled(comp, costs).end == simulate(sched, costs).end
    assert len(comp.actions) == sum(len(v) for v in sched.values())


def test_each_timing_charges_its_actions_to_the_meter_it_is_given(make_costs):
    sched, costs = one_f_one_b(2, 4), make_costs(2, f=1.0, i=2.0)
    n = sum(len(v) for v in sched.values())
    meter = WorkMeter()
    simulate(sched, costs, meter=meter)
    assert meter.count == n
    simulate_compiled(compile_schedule(sched, 2, (0, 1)), costs, detail=False, meter=meter)
    assert meter.count == 2 * n
    assert validate(sched, costs, num_microbatches=4, meter=meter) == []
    assert meter.count == 3 * n
    simulate(sched, costs)  # no meter: charged to nobody
    assert meter.count == 3 * n


def test_deadlock_reports_blocked_positions(make_costs):
    costs = make_costs(2)
    sched = {0: [Action(0, "F", 0), Action(0, "B", 0)],
             1: [Action(1, "B", 0), Action(1, "F", 0)]}  # backward before its own forward
    with pytest.raises(DeadlockError, match="rank 0 stuck at position 1 .*rank 1 stuck at position 0") as exc:
        simulate(sched, costs)
    assert exc.value.blocked == {0: 1, 1: 0}


def test_missing_dependency_is_named(make_costs):
    sched = {0: [Action(0, "F", 0), Action(0, "B", 0)], 1: [Action(1, "B", 0)]}
    with pytest.raises(ValueError, match="rank 1: action 1B0 needs 1F0, which no rank runs"):
        simulate(sched, make_costs(2))


def test_out_of_range_stage_is_named(make_costs):
    sched = {0: [Action(0, "F", 0), Action(2, "F", 0)]}
    with pytest.raises(ValueError, match="rank 0: action 2F0 has a stage outside 0..1"):
        compile_schedule(sched, 2, (0, 1))


def test_empty_schedule(make_costs):
    sim = simulate({0: [], 1: []}, make_costs(2, static=7))
    assert sim.step_time == 0.0 and sim.critical_path == [] and sim.peak_memory_bytes == [7, 7]
