"""``ppplan replay --calibrate``: two calibration plans on the judged plan's partition, replayed
with their steps alternating with the judged plan's, and the judged plan's calibrated
prediction from them (the path ``benchmarks/replay.py`` calibrates through)."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from planner.core.errors import InputError
from planner.core.schedule import ActionKind
from solvers.schedule.families.generators import interleaved_1f1b, one_f_one_b

from test_replay_run import make_plan, tiny_config  # noqa: E402  (same tests folder)


def _kinds(plan) -> set[str]:
    return {p.kind for acts in plan.parsed_schedule().values() for a in acts for p in a.parts}


@pytest.mark.parametrize("schedule,bounds", [
    (one_f_one_b(2, 4, fuse=True), [(0, 4), (4, 7)]),
    (interleaved_1f1b(2, 2, 4), [(0, 2), (2, 4), (4, 5), (5, 7)])])
def test_calibration_plans_keep_the_partition_and_run_full_and_split_backwards(tmp_path, schedule, bounds):
    from planner.replay.predict import calibration_plans
    from planner.simulation import simulate_plan, validate_plan

    plan = make_plan(tiny_config(tmp_path), schedule, bounds)
    full, split = calibration_plans(plan)
    for cal in (full, split):
        assert cal.bounds() == plan.bounds() and cal.ranks() == plan.ranks() and cal.stage_costs == plan.stage_costs
        assert validate_plan(cal) == []
        assert cal.predicted.step_time_s == pytest.approx(simulate_plan(cal)["step_time_s"])
    assert _kinds(full) == {ActionKind.F, ActionKind.B}
    assert _kinds(split) == {ActionKind.F, ActionKind.I, ActionKind.W}


def test_v_placed_plans_have_no_calibration_plans(tmp_path):
    from planner.replay.predict import calibration_plans

    plan = make_plan(tiny_config(tmp_path), interleaved_1f1b(2, 2, 4), [(0, 2), (2, 4), (4, 5), (5, 7)])
    plan.parallel = dataclasses.replace(plan.parallel, placement="v")  # the typed part is frozen
    with pytest.raises(InputError, match="--calibrate: .*loop placement"):
        calibration_plans(plan)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cli_calibrate_reports_the_calibrated_prediction(ppplan, tmp_path):
    from planner.replay.calibrate import Calibration, calibrated_plan

    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4, split_w=True), [(0, 4), (4, 7)])
    plan.save(tmp_path / "plan.json")
    res = ppplan("replay", "plan.json", "--steps", "3", "--warmup", "0", "--threads", "1", "--no-grad-check",
                 "--calibrate", "--out", "r.json")
    assert res.code == 0, res.err
    rep = json.loads((tmp_path / "r.json").read_text())
    c = rep["calibrated"]
    cal = Calibration.from_dict(c["calibration"])
    assert set(cal.alone_scale) >= {"F", "B", "I", "W"}  # B from the full plan, I and W from the split one
    assert c["step_time_s"] == pytest.approx(calibrated_plan(plan, cal).predicted.step_time_s)
    mean = statistics.fmean(rep["measured"]["step_times_s"])
    assert c["measured_mean_step_s"] == pytest.approx(mean)
    assert c["step_time_error"] == pytest.approx(mean / c["step_time_s"] - 1)
    assert [x["schedule"] for x in c["calibration_plans_in_sample"]] == ["1f1b", "1f1b, split I and W"]
    assert rep["predicted"]["step_time_s"] != pytest.approx(c["step_time_s"])
    assert f"calibrated predicted {c['step_time_s'] * 1e3:9.2f} ms" in res.out
