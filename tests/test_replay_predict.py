"""The replay judges the order that runs: a plan whose schedule was changed after planning is
simulated again (the simulator ``ppplan simulate`` runs), never judged against its
recorded prediction, and the report and summary give both figures."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from planner.core.schedule import format_schedule
from solvers.schedule.families.generators import gpipe, one_f_one_b

from test_replay_run import make_plan, tiny_config  # noqa: E402  (same tests folder)


def _changed_order(tmp_path):
    """A 1F1B plan whose schedule was replaced by GPipe's after planning: its recorded
    prediction is 1F1B's."""
    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)])
    return replace(plan, schedule=format_schedule(gpipe(2, 4)))


def test_a_changed_order_is_simulated_again_and_the_recorded_figure_kept_beside_it(tmp_path):
    from planner.replay.predict import simulate_plan_as_run
    from planner.simulation import simulate_plan

    plan = _changed_order(tmp_path)
    simulated = simulate_plan(plan)["step_time_s"]
    recorded = plan.predicted.step_time_s
    assert simulated > recorded * 1.05  # GPipe on 4 microbatches: a longer step than 1F1B's
    pred, sim = simulate_plan_as_run(plan)
    assert pred["step_time_s"] == pytest.approx(simulated) and sim.step_time == pytest.approx(simulated)
    assert pred["ppplan_simulate_step_time_s"] == pytest.approx(simulated)
    assert pred["recorded_step_time_s"] == recorded and pred["recorded_matches"] is False
    assert pred["busy_s"] == pytest.approx(simulate_plan(plan)["busy_s"])


def test_an_unchanged_plan_matches_its_recorded_prediction(tmp_path):
    from planner.replay.predict import simulate_plan_as_run

    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)])
    pred, _ = simulate_plan_as_run(plan)
    assert pred["recorded_matches"] is True and pred["step_time_s"] == pytest.approx(plan.predicted.step_time_s)


def test_an_emulated_link_is_never_an_exact_replay(tmp_path):
    from planner.replay.predict import is_exact_replay

    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)])
    assert is_exact_replay(plan, device="cpu", scale=1.0, seq_len=16)
    assert not is_exact_replay(plan, device="cpu", scale=1.0, seq_len=16, link="emulated")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_cli_replay_of_a_changed_order_is_judged_against_its_simulation(ppplan, tmp_path):
    from planner.simulation import simulate_plan

    plan = _changed_order(tmp_path)
    path, out = tmp_path / "plan.json", tmp_path / "r.json"
    plan.save(path)
    res = ppplan("replay", str(path), "--steps", "2", "--warmup", "0", "--threads", "1", "--no-grad-check",
                 "--out", str(out))
    assert res.code == 0, res.err
    rep = json.loads(out.read_text())
    simulated, recorded = simulate_plan(plan)["step_time_s"], plan.predicted.step_time_s
    p, m, e = rep["predicted"], rep["measured"], rep["prediction_error"]
    assert p["step_time_s"] == pytest.approx(simulated) and p["recorded_step_time_s"] == recorded
    assert e["step_time"] == pytest.approx(m["step_time_s"] / simulated - 1)
    assert e["step_time_vs_recorded"] == pytest.approx(m["step_time_s"] / recorded - 1)
    assert f"predicted {simulated * 1e3:9.2f} ms" in res.out
    assert f"recorded prediction {recorded * 1e3:.2f} ms is not the simulation" in res.out
    # no --profile on CPU: no stored peak, so no MFU (never a peak measured at start-up)
    assert m["mfu"] is None and p["mfu"] is None and m["peak_flops_source"].startswith("n/a")
    assert "MFU        measured       n/a" in res.out
