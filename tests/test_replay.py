"""Fast checks of the replay package: plan checks, options, gradient comparison, timeline
matching, re-prediction adjustments, trace, and the CLI's bad-input paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from planner.core.costs import CostTable, LayerCost
from planner.core.errors import InputError
from planner.core.schedule import parse_schedule
from solvers.schedule.families.generators import one_f_one_b

from test_replay_run import make_plan, tiny_config  # noqa: E402  (same tests folder)


def _plan(tmp_path, schedule=None, **kw):
    return make_plan(tiny_config(tmp_path), schedule or one_f_one_b(2, 4), [(0, 4), (4, 7)], **kw)


def test_world_size_must_match_plan_pp(tmp_path):
    from planner.replay.lowering import check_plan

    with pytest.raises(InputError, match=r"plan.parallel.pp: the plan has pp=2 but the replay runs 3"):
        check_plan(_plan(tmp_path), world_size=3)


def test_plan_failing_validation_is_refused(tmp_path):
    from planner.replay.lowering import check_plan

    plan = _plan(tmp_path)
    plan.schedule["1"] = plan.schedule["1"][:-1]  # drop 1B3
    with pytest.raises(InputError, match=r"plan.schedule: fails validation: .*1I3 is never run"):
        check_plan(plan, world_size=2)


def test_options_are_checked():
    from planner.replay import ReplayOptions

    with pytest.raises(InputError, match="--scale"):
        ReplayOptions(scale=1.5).check()
    with pytest.raises(InputError, match="--steps"):
        ReplayOptions(steps=0).check()
    with pytest.raises(InputError, match="fault"):
        ReplayOptions(fault="explode:1").check()


def test_model_too_large_for_memory_names_scale(tmp_path):
    from planner.replay import ReplayOptions
    from planner.replay.options import check_fits

    plan = _plan(tmp_path)
    plan.model = {"name": "deepseek-v3", "num_layers": 64}
    with pytest.raises(InputError, match=r"--scale: the model at scale 1 needs about .* GiB.*pass --scale"):
        check_fits(plan, ReplayOptions())


def test_compare_grads_passes_equal_and_flags_a_difference():
    from planner.replay.report import compare_grads

    ref = {"a": torch.ones(3), "b": torch.zeros(2)}
    ok = compare_grads({k: v.clone() for k, v in ref.items()}, [1.0], ref, [1.0])
    assert ok["passed"] and ok["max_abs_diff"] == 0.0
    bad = compare_grads({"a": torch.tensor([1.0, 1.0, 1.5]), "b": torch.zeros(2)}, [1.0], ref, [1.0])
    assert not bad["passed"] and bad["max_abs_diff"] == pytest.approx(0.5)
    assert bad["mismatched"] == ["a"] and bad["worst_parameter"] == "a"
    assert not compare_grads(ref, [1.0], ref, [1.5])["passed"]  # loss differs
    assert not compare_grads({"a": ref["a"]}, [1.0], ref, [1.0])["passed"]  # missing gradient


def test_action_timeline_merges_fused_parts_and_rejects_other_orders(tmp_path):
    from planner.replay.measure import action_timeline

    plan = _plan(tmp_path, one_f_one_b(2, 2, fuse=True))  # rank 1: 1F0 (1F1;1B0) 1B1
    spans = [(1, "F", 0, 0.0, 1.0), (1, "F", 1, 1.0, 2.0), (1, "B", 0, 2.5, 4.0), (1, "B", 1, 4.0, 5.0)]
    rows = action_timeline(plan, 1, spans)
    assert [r["action"] for r in rows] == ["1F0", "(1F1;1B0)OVERLAP_F_B", "1B1"]
    assert rows[1]["start"] == 1.0 and rows[1]["end"] == 4.0 and rows[1]["busy"] == pytest.approx(2.5)
    with pytest.raises(RuntimeError, match="do not follow the plan"):
        action_timeline(plan, 1, list(reversed(spans)))


def _table(n: int) -> CostTable:
    layers = tuple(LayerCost(type="a" if k else "emb", f=1.0, i=2.0 if k else 0.0, w=1.0, b=2.4 if k else 1.0)
                   for k in range(n))
    return CostTable(model="m", source="measured", layers=layers)


def test_reprediction_models_full_backward_and_torch_first_stage(tmp_path):
    from planner.replay.predict import REPREDICTED, simulate_on_table

    table = _table(7)
    pred_b, sim_b = simulate_on_table(_plan(tmp_path, one_f_one_b(2, 4)), table)
    assert pred_b["source"] == REPREDICTED
    # B actions take the measured full backward (3 x 2.4 + 1.0 on stage 0), not I + W
    assert pred_b["busy_s"][0] == pytest.approx(4 * (4.0 + 3 * 2.4 + 1.0))
    assert pred_b["busy_s"][1] == pytest.approx(4 * (3.0 + 3 * 2.4))
    pred_iw, _ = simulate_on_table(_plan(tmp_path, one_f_one_b(2, 4, split_w=True)), table)
    # split: stage 1 runs I + W; stage 0's W is torch's full backward ([Note: torch first stage])
    assert pred_iw["busy_s"][0] == pytest.approx(4 * (4.0 + 3 * 2.4 + 1.0))
    assert pred_iw["busy_s"][1] == pytest.approx(4 * (3.0 + 3 * 3.0))
    from planner.replay.predict import _torch_first_stage
    from planner.core.stage_costs import stage_costs

    plan = _plan(tmp_path, one_f_one_b(2, 4, split_w=True))
    sc = _torch_first_stage(stage_costs(table, plan.bounds(), plan.ranks()), plan)
    assert sc.i[0] == 0.0 and sc.w[0] == pytest.approx(3 * 2.4 + 1.0) and sc.i[1] == 6.0
    assert sc.b_time(0) == pytest.approx(3 * 2.4 + 1.0)  # a B on stage 0 is still the full backward


def test_exact_replay_only_for_a_profile_of_this_device_and_shape(tmp_path):
    from planner.replay.predict import is_exact_replay

    plan = _plan(tmp_path)
    assert is_exact_replay(plan, device="cpu", scale=1.0, seq_len=16)
    assert not is_exact_replay(plan, device="NVIDIA H200", scale=1.0, seq_len=16)
    assert not is_exact_replay(plan, device="cpu", scale=0.5, seq_len=16)
    plan.costs = {**plan.costs, "source": "analytical"}
    assert not is_exact_replay(plan, device="cpu", scale=1.0, seq_len=16)


def test_trace_has_measured_and_predicted_rows(tmp_path):
    from planner.core.simulate import simulate
    from planner.replay.report import chrome_trace

    plan = _plan(tmp_path, one_f_one_b(2, 1))
    sim = simulate(plan.parsed_schedule(), plan.parsed_stage_costs())
    measured = [[{"action": "0F0", "start": 0.0, "end": 0.001, "busy": 0.001},
                 {"action": "0B0", "start": 0.002, "end": 0.004, "busy": 0.002}],
                [{"action": "1F0", "start": 0.001, "end": 0.002, "busy": 0.001},
                 {"action": "1B0", "start": 0.002, "end": 0.003, "busy": 0.001}]]
    trace = chrome_trace(measured, sim, predicted_label="plan")
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {(e["pid"], e["tid"], e["name"]) for e in xs} == {
        (pid, r, f"{r}{k}0") for pid in (0, 1) for r in (0, 1) for k in "FB"}
    assert next(e for e in xs if e["pid"] == 0 and e["name"] == "0B0")["dur"] == pytest.approx(2000.0)
    json.dumps(trace)


def _cli(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "planner.cli", "replay", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_cli_bad_plan_file_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    run = _cli(str(bad), "--out", str(tmp_path / "r.json"))
    assert run.returncode == 2 and run.stderr.startswith("error: plan:") and "not valid JSON" in run.stderr
    assert not (tmp_path / "r.json").exists()


def test_cli_world_size_mismatch_under_torchrun_exits_2(tmp_path):
    path = tmp_path / "plan.json"
    _plan(tmp_path).save(path)
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    run = _cli(str(path), "--out", str(tmp_path / "r.json"), env=env)
    assert run.returncode == 2
    assert "plan.parallel.pp: the plan has pp=2 but the replay runs 1 processes" in run.stderr
    assert "Traceback" not in run.stderr


def test_cli_rejects_bad_scale(tmp_path):
    path = tmp_path / "plan.json"
    _plan(tmp_path).save(path)
    run = _cli(str(path), "--scale", "0")
    assert run.returncode == 2 and "--scale" in run.stderr


def test_replay_engine_plan_parses_as_torch_actions(tmp_path):
    from planner.replay.lowering import to_torch_actions

    sched = parse_schedule({"0": ["0F0", "0F1", "(0F2;0I0)OVERLAP_F_B", "0W0"], "1": ["1F0"]})
    acts = to_torch_actions(sched)
    assert [str(a) for a in acts[0]] == ["0F0", "0F1", "(0F2;0I0)OVERLAP_F_B", "0W0"]
    assert acts[0][2].sub_actions[1].computation_type.value == "I"


def test_reprediction_table_recomputes_as_the_plan_does(tmp_path, monkeypatch):
    """A full recomputation's backward runs the forward again: the table a re-prediction uses
    must be timed with the layers recomputing as the replayed plan's do."""
    import planner.runtime as runtime
    from planner.replay.costs import measure_layer_costs
    from planner.replay.lowering import replay_model
    from profiler.timing import Clock

    seen = []
    real = runtime.apply_recompute
    monkeypatch.setattr(runtime, "apply_recompute", lambda layers, mode: (seen.append(mode), real(layers, mode)))
    rm = replay_model(_plan(tmp_path), scale=1.0, seq_len=16)
    table = measure_layer_costs(rm, torch.device("cpu"), Clock(torch.device("cpu")), label="cpu", reps=1,
                                recompute="full")
    assert seen and set(seen) == {"full"} and table.meta["recompute"] == "full"
    assert all(lc.b is not None and lc.b > 0 for lc in table.layers if lc.role != "embedding")
