"""Runtime calibration of replays: the shared-core simulation, the step decomposition,
what a calibration replay measures (recovered from synthetic timelines with known
figures), and how it enters stage costs, plans and re-predictions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.core.simulate import simulate
from solvers.schedule.families.generators import interleaved_1f1b, one_f_one_b

from test_replay import _table  # noqa: E402  (same tests folder)
from test_replay_run import make_plan, tiny_config  # noqa: E402

ALONE = {"F": 0.5, "B": 0.8}
SLOW = {"F": 2.0, "B": 1.5}
LATENCY = 3e-4
STEP_EDGES = 7e-4


def _plan(tmp_path, microbatches=4):
    return make_plan(tiny_config(tmp_path), one_f_one_b(2, microbatches), [(0, 4), (4, 7)],
                     microbatches=microbatches)


def _known(**kw):
    from planner.replay.calibrate import Calibration

    return Calibration(**{"alone_scale": dict(ALONE), "slowdown": {k: 1.0 for k in ALONE},
                          "p2p_latency_s": LATENCY, **kw})


def _gathered(sim, steps=3):
    """What the ranks would gather if every action ran as ``sim`` says, each step ending
    STEP_EDGES after its last action; rank 1's clock starts 1 ms after rank 0's."""
    bases = [100.0, 100.001]
    ranks = []
    for r, row in enumerate(sim.compiled.order):
        off = bases[r] - bases[0]
        spans = [(p.stage, p.kind, p.microbatch, sim.start[n] - off, sim.end[n] - off)
                 for n in row for p in sim.actions[n].parts]
        ranks.append({"rank": r, "steps": [{"step_s": sim.step_time + STEP_EDGES - off, "base_s": bases[r],
                                            "spans": spans}] * steps})
    return ranks


@pytest.mark.parametrize("schedule,bounds", [
    (one_f_one_b(2, 4), [(0, 4), (4, 7)]),
    (one_f_one_b(2, 4, split_w=True), [(0, 4), (4, 7)]),
    (interleaved_1f1b(2, 2, 4), [(0, 2), (2, 4), (4, 5), (5, 7)])])
def test_shared_simulation_without_slowdown_is_the_simulator(tmp_path, schedule, bounds):
    from planner.replay.calibrate import simulate_shared

    sc = make_plan(tiny_config(tmp_path), schedule, bounds).parsed_stage_costs()
    base, shared = simulate(schedule, sc), simulate_shared(schedule, sc, {"F": 1.0, "B": 1.0})
    assert shared.step_time == pytest.approx(base.step_time)
    assert shared.start == pytest.approx(base.start) and shared.end == pytest.approx(base.end)


def test_shared_simulation_slows_actions_only_while_another_rank_computes(tmp_path):
    from planner.replay.calibrate import simulate_shared

    plan = _plan(tmp_path)
    sc = plan.parsed_stage_costs()
    base = simulate(plan.parsed_schedule(), sc)
    c = 2.0
    sim = simulate_shared(plan.parsed_schedule(), sc, {"F": c, "B": c})
    assert sim.step_time > base.step_time
    spans = [[(sim.start[n], sim.end[n]) for n in row] for row in sim.compiled.order]
    for r, row in enumerate(sim.compiled.order):
        for n in row:
            lo, hi = sim.start[n], sim.end[n]
            shared = sum(max(0.0, min(hi, e) - max(lo, s)) for s, e in spans[1 - r])
            # work done = alone time at rate 1 + shared time at rate 1 / c
            assert (hi - lo - shared) + shared / c == pytest.approx(base.end[n] - base.start[n])
    assert sim.compiled.order[0] and sim.start[sim.compiled.order[0][0]] == 0.0


def test_with_calibrated_costs_every_kind_is_scaled_and_latency_replaced(tmp_path):
    from planner.replay.calibrate import calibrated_costs

    sc = _plan(tmp_path).parsed_stage_costs()
    out = calibrated_costs(sc, _known(between_actions_s=1e-3))
    assert out.f == pytest.approx(tuple(ALONE["F"] * x + 1e-3 for x in sc.f))
    # B = I + W: scaled by B's figure (I and W not measured), between-action work once
    assert [i + w for i, w in zip(out.i, out.w)] == pytest.approx(
        [ALONE["B"] * (i + w) + 1e-3 for i, w in zip(sc.i, sc.w)])
    assert out.p2p.latency_s == LATENCY and out.p2p.bandwidth == sc.p2p.bandwidth
    assert out.fused_time(0, 0) == pytest.approx(out.f[0] + out.i[0] - 1e-3)
    assert _known().missing == ["I", "W"]


def test_calibration_recovers_known_figures_from_a_timeline(tmp_path):
    from planner.replay.calibrate import measure_calibration, simulate_with_calibration

    plan = _plan(tmp_path)
    sc = plan.parsed_stage_costs()
    predicted = simulate(plan.parsed_schedule(), sc)
    known = _known()
    _, actual = simulate_with_calibration(plan.parsed_schedule(), sc, known)
    cal = measure_calibration(plan, predicted, _gathered(actual), source="synthetic")
    assert cal.alone_scale == pytest.approx(ALONE)
    assert cal.slowdown == pytest.approx({"F": 1.0, "B": 1.0})
    assert cal.p2p_latency_s == pytest.approx(LATENCY)
    assert cal.between_actions_s == pytest.approx(0.0, abs=1e-12)
    assert cal.step_overhead_s == pytest.approx(STEP_EDGES)
    assert cal.samples["F"] == cal.samples["B"] == 3 * 2 * 4 and cal.samples["messages"] > 0
    step, _ = simulate_with_calibration(plan.parsed_schedule(), sc, cal)
    assert step == pytest.approx(actual.step_time + STEP_EDGES)


def test_slowdown_is_measured_from_shared_and_alone_actions():
    from planner.replay.calibrate import _line

    # alone 0.5 x the table, 2x that while the other rank computes, a few half-shared
    samples = [{"others_busy": x, "pred": p, "dur": 0.5 * p * (1 + x)}
               for x in (0.0, 1.0, 0.5, 1.0, 0.0) for p in (0.1, 0.2)]
    assert _line(samples) == pytest.approx((0.5, 2.0))
    # nothing ever shared: no slowdown can be measured, the mean ratio is the scale
    assert _line([{"others_busy": 0.0, "pred": 1.0, "dur": d} for d in (0.4, 0.6, 0.5)]) == pytest.approx((0.5, 1.0))


def test_decomposition_terms_add_up_to_the_error(tmp_path):
    from planner.replay.calibrate import simulate_with_calibration
    from planner.replay.measure import decompose
    from planner.replay.measure import action_timeline

    plan = _plan(tmp_path)
    sc = plan.parsed_stage_costs()
    predicted = simulate(plan.parsed_schedule(), sc)
    _, actual = simulate_with_calibration(plan.parsed_schedule(), sc, _known(slowdown=dict(SLOW)))
    ranks = _gathered(actual, steps=1)
    timelines = [action_timeline(plan, r["rank"], r["steps"][0]["spans"]) for r in ranks]
    parts = decompose(predicted, timelines, [r["steps"][0]["base_s"] for r in ranks],
                      [r["steps"][0]["step_s"] for r in ranks])
    for p in parts:
        d = p["difference_s"]
        assert d["step"] == pytest.approx(d["first_start"] + d["busy"] + d["gaps"] + d["tail"])
        last = actual.compiled.order[p["rank"]][-1]  # the ranks' clock offset cancels in the tail
        assert d["tail"] == pytest.approx(STEP_EDGES + actual.step_time - actual.end[last] - p["predicted"]["tail_s"])
    # rank 1 waits for every forward input: after it is ready, the message latency
    assert parts[1]["after_ready_per_action_s"]["waited_for_input"] == pytest.approx(LATENCY + sc.out_bytes[0] / sc.p2p.bandwidth)


def test_calibrated_plan_and_reprediction_use_the_calibration(tmp_path):
    from planner.replay.calibrate import calibrated_plan, simulate_with_calibration
    from planner.replay.predict import simulate_plan_as_run, simulate_on_table

    plan = _plan(tmp_path)
    cal = _known(slowdown=dict(SLOW), step_overhead_s=STEP_EDGES)
    cplan = calibrated_plan(plan, cal)
    step, _ = simulate_with_calibration(plan.parsed_schedule(), plan.parsed_stage_costs(), cal)
    assert cplan.predicted.step_time_s == pytest.approx(step)
    assert cplan.predicted["uncalibrated_step_time_s"] == plan.predicted.step_time_s
    assert cplan.costs["calibration"]["slowdown"] == SLOW
    pred, sim = simulate_plan_as_run(cplan)
    assert pred["step_time_s"] == pytest.approx(step) and "calibrated" in pred["source"]
    assert sim.step_time == pytest.approx(step - STEP_EDGES)
    table = _table(7)
    base, _ = simulate_on_table(plan, table)
    flat = _known(alone_scale={"F": 1.0, "B": 1.0})  # 1x costs, no slowdown: only the latency differs
    same, _ = simulate_on_table(plan, replace(table, meta={**table.meta, "calibration": flat.to_dict()}))
    assert same["busy_s"] == pytest.approx(base["busy_s"])
    with_cal, sim = simulate_on_table(plan, replace(table, meta={**table.meta, "calibration": cal.to_dict()}))
    assert with_cal["step_time_s"] == pytest.approx(sim.step_time + STEP_EDGES)
    assert with_cal["step_time_s"] < base["step_time_s"]  # alone scales below 1 outweigh the slowdown here
    assert with_cal["calibration"]["alone_scale"] == ALONE


def test_calibration_of_a_pp1_plan_with_an_iw_split_skips_the_no_op_i(tmp_path):
    """torch runs stage 0's I as a no-op ([Note: torch first stage]): on a pp 1 plan every
    I is predicted 0 s, so I has nothing to fit and takes its fallback (was StatisticsError)."""
    from planner.replay.calibrate import _line, measure_calibration
    from planner.replay.predict import simulate_plan_as_run

    assert _line([]) is None and _line([{"others_busy": 0.0, "pred": 0.0, "dur": 1e-4}]) is None
    plan = make_plan(tiny_config(tmp_path), one_f_one_b(1, 3, split_w=True), [(0, 7)], pp=1, microbatches=3)
    _, sim = simulate_plan_as_run(plan)
    row = sim.compiled.order[0]
    assert any(sim.end[n] == sim.start[n] for n in row)  # the no-op I actions
    spans = [(p.stage, p.kind, p.microbatch, sim.start[n], sim.start[n] + 0.5 * (sim.end[n] - sim.start[n]))
             for n in row for p in sim.actions[n].parts]
    ranks = [{"rank": 0, "steps": [{"step_s": sim.step_time, "base_s": 10.0, "spans": spans}] * 2}]
    cal = measure_calibration(plan, sim, ranks, source="synthetic")
    assert "I" not in cal.alone_scale and cal.alone("I") == cal.alone_scale["B"] == pytest.approx(0.5)
    # stage 0's W is torch's full backward, predicted as I + W: it calibrates B, not W
    assert cal.alone_scale["B"] == pytest.approx(0.5) and "W" not in cal.alone_scale and cal.samples["I"] == 6


def test_stage0_w_of_a_split_plan_is_calibrated_and_predicted_as_b(tmp_path):
    from planner.replay.calibrate import calibrated_costs, simulate_with_calibration, torch_first_stage

    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4, split_w=True), [(0, 4), (4, 7)])
    sched = plan.parsed_schedule()
    sc = torch_first_stage(plan.parsed_stage_costs(), sched)
    cal = _known(alone_scale={"F": 1.0, "B": 0.5, "I": 1.0, "W": 2.0})
    out = calibrated_costs(sc, cal, w0_full=True)
    assert out.w[0] == pytest.approx(0.5 * sc.w[0]) and out.w[1] == pytest.approx(2.0 * sc.w[1])
    step, sim = simulate_with_calibration(sched, sc, cal)
    w0 = [n for n, a in enumerate(sim.actions) if a.parts[0].stage == 0 and a.parts[0].kind == "W"]
    assert w0 and all(sim.end[n] - sim.start[n] == pytest.approx(out.w[0]) for n in w0)


def test_split_calibration_supplies_i_and_w():
    from planner.replay.calibrate import Calibration, with_split_kinds

    full = _known(between_actions_s=1e-3, step_overhead_s=2e-3)
    split = Calibration(alone_scale={"F": 0.9, "I": 0.7, "W": 0.6}, slowdown={"F": 1.1, "I": 1.2, "W": 1.3},
                        samples={"F": 4, "I": 4, "W": 4}, between_actions_s=5.0, source="split")
    both = with_split_kinds(full, split)
    assert both.alone_scale == {**ALONE, "I": 0.7, "W": 0.6} and both.slowdown["W"] == 1.3
    assert both.between_actions_s == 1e-3 and both.step_overhead_s == 2e-3 and both.missing == []
    assert with_split_kinds(full, Calibration()).alone_scale == ALONE  # nothing split measured: unchanged
