"""Replaying small plans on 2 gloo processes: gradients, timing report, faults.

A tiny Qwen3-Next-like model (linear-attention and full-attention MoE layers, an MTP
layer, embedding and head: 7 layers) keeps each replay to a few seconds. Plans are
built directly: schedules from ``solvers.schedule.families.generators`` (1F1B, interleaved, fused
pairs) and ``solvers.schedule.engines.w_fill`` (zero-bubble style W deferral).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.core.costs import CostTable, LayerCost
from planner.core.placement import stage_ranks
from planner.core.plan import Plan, stage_costs_to_dict
from planner.core.schedule import Schedule, format_schedule
from planner.core.simulate import simulate
from planner.core.stage_costs import stage_costs
from solvers.schedule.families.generators import interleaved_1f1b, one_f_one_b

TINY = {
    "model_type": "qwen3_next", "hidden_size": 32, "intermediate_size": 64,
    "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_experts": 4,
    "num_experts_per_tok": 2, "full_attention_interval": 4, "linear_num_key_heads": 2,
    "linear_key_head_dim": 8, "linear_num_value_heads": 4, "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4, "num_nextn_predict_layers": 1, "vocab_size": 128,
}
SEQ = 16
NUM_LAYERS = 7  # embedding, 4 decoder, 1 MTP, head


def tiny_config(tmp_path: Path) -> str:
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(TINY))
    return str(path)


def _unit_table() -> CostTable:
    layers = tuple(LayerCost(type=f"t{k}", f=1e-3, i=1e-3, w=1e-3, out_bytes=SEQ * 32 * 4)
                   for k in range(NUM_LAYERS))
    return CostTable(model="tiny", source="user", layers=layers)


def make_plan(config: str, schedule: Schedule, bounds: list[tuple[int, int]], *, pp: int = 2,
              microbatches: int = 4, costs: dict | None = None) -> Plan:
    """A plan over the tiny model; ``costs`` defaults to 'measured here' (prediction copied)."""
    ranks = stage_ranks(len(bounds), pp, "loop")
    sc = stage_costs(_unit_table(), bounds, ranks)
    sim = simulate(schedule, sc)
    return Plan(
        model={"name": config, "num_layers": NUM_LAYERS},
        cluster={}, parallel={"pp": pp, "vpp": len(bounds) // pp, "tp": 1, "ep": 1, "dp": 1,
                              "placement": "loop"},
        microbatches={"count": microbatches, "size": 1},
        stages=[{"stage": s, "rank": r, "layers": list(b)} for s, (b, r) in enumerate(zip(bounds, ranks))],
        schedule=format_schedule(schedule), stage_costs=stage_costs_to_dict(sc),
        predicted={"step_time_s": sim.step_time, "bubble_fraction": sim.bubble_fraction, "mfu": 0.0,
                   "peak_memory_bytes": sim.peak_memory_bytes, "memory_limit_bytes": None,
                   "busy_s": sim.busy},
        baselines={}, solver={"name": "test", "status": "FIXED", "wall_s": 0.0, "gap": None},
        costs=costs or {"source": "measured", "device": "cpu", "scale": 1.0, "seq_len": SEQ})


def zero_bubble(pp: int, microbatches: int) -> Schedule:
    """1F1B with I/W split and every W moved into a bubble by ``solvers.schedule.engines.w_fill``."""
    from solvers.schedule.engines.w_fill import fill_w

    bounds = [(0, 4), (4, 7)]
    sc = stage_costs(_unit_table(), bounds, stage_ranks(2, pp, "loop"))
    return fill_w(one_f_one_b(pp, microbatches, split_w=True), sc)


PLANS = {
    "1f1b-iw": (lambda: one_f_one_b(2, 4, split_w=True), [(0, 4), (4, 7)]),
    "interleaved": (lambda: interleaved_1f1b(2, 2, 4), [(0, 2), (2, 4), (4, 5), (5, 7)]),
    "zero-bubble": (lambda: zero_bubble(2, 4), [(0, 4), (4, 7)]),
    "fused": (lambda: one_f_one_b(2, 4, fuse=True), [(0, 4), (4, 7)]),
    "fused-iw": (lambda: one_f_one_b(2, 4, fuse=True, split_w=True), [(0, 4), (4, 7)]),
}


def _opts(**kw):
    from planner.replay import ReplayOptions

    return ReplayOptions(**{"steps": 2, "warmup": 0, "timeout_s": 20.0, "deadline_s": 120.0,
                            "threads": 1, **kw})


def _assert_gone(pids: tuple[int, ...]) -> None:
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", list(PLANS))
def test_replay_matches_single_process_gradients(tmp_path, name):
    from planner.replay import replay
    from planner.replay.predict import simulate_plan_as_run

    make_schedule, bounds = PLANS[name]
    schedule = make_schedule()
    plan = make_plan(tiny_config(tmp_path), schedule, bounds)
    result = replay(plan, _opts())
    rep = result.report
    assert rep["grad_check"]["passed"], rep["grad_check"]
    assert rep["grad_check"]["loss_max_abs_diff"] == 0.0
    assert rep["grad_check"]["parameters"] > 20
    m = rep["measured"]
    assert m["step_time_s"] > 0 and len(m["busy_s"]) == 2
    assert all(0 < b <= m["step_time_s"] * 1.001 for b in m["busy_s"])
    assert m["mfu"] is None  # no stored CPU peak given (planner.replay.device)
    simulated = simulate_plan_as_run(plan)[0]["step_time_s"]  # the order that ran, simulated again
    assert rep["predicted"]["step_time_s"] == pytest.approx(simulated)
    assert rep["prediction_error"]["step_time"] == pytest.approx(m["step_time_s"] / simulated - 1)
    events = [e for e in result.trace["traceEvents"] if e["ph"] == "X"]
    measured = [e["name"] for e in events if e["pid"] == 0]
    assert sorted(measured) == sorted(a for acts in plan.schedule.values() for a in acts)
    assert len([e for e in events if e["pid"] == 1]) == len(measured)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cli_replays_analytical_plan_with_reprediction(tmp_path):
    cfg = tiny_config(tmp_path)
    schedule, bounds = PLANS["1f1b-iw"][0](), PLANS["1f1b-iw"][1]
    plan = make_plan(cfg, schedule, bounds, costs={"source": "analytical", "device": "h100",
                                                   "scale": 1.0, "seq_len": 4096})
    path = tmp_path / "plan.json"
    plan.save(path)
    out, trace = tmp_path / "r.json", tmp_path / "t.json"
    run = subprocess.run([sys.executable, "-m", "planner.cli", "replay", str(path), "--seq-len", str(SEQ),
                          "--steps", "2", "--warmup", "0", "--threads", "1", "--timeout", "20",
                          "--out", str(out), "--trace", str(trace)],
                         capture_output=True, text=True, timeout=110)
    assert run.returncode == 0, run.stderr
    rep = json.loads(out.read_text())
    assert rep["predicted"]["source"] == "re-predicted from a profile measured here"
    assert rep["predicted"]["plan"]["costs"]["device"] == "h100"
    assert set(rep["predicted"]["costs"]["layer_types"]) == {"embedding", "linear+moe", "gqa+moe",
                                                              "mtp:gqa+moe", "head"}
    assert rep["grad_check"]["passed"] is True
    names = {e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"]
             if e.get("name") == "process_name"}
    assert names == {"measured", "predicted (re-predicted from a profile measured here)"}
    assert "re-predicted from a profile measured here" in run.stdout


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", ["die:1", "hang:1"])
def test_dead_or_hung_rank_fails_fast_without_orphans(tmp_path, fault):
    from planner.replay import ReplayFailed, replay

    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)])
    with pytest.raises(ReplayFailed, match="rank (0|1)") as info:
        replay(plan, _opts(fault=fault, timeout_s=5.0, deadline_s=45.0))
    if fault == "die:1":
        assert "rank 1 died" in str(info.value)
    _assert_gone(info.value.pids)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_launcher_deadline_stops_a_replay_that_never_answers(tmp_path):
    from planner.replay import ReplayFailed, replay

    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)])
    with pytest.raises(ReplayFailed, match=r"no result within 6 s \(--deadline\); ranks still running: \[0, 1\]") as info:
        replay(plan, _opts(fault="hang:1", timeout_s=60.0, deadline_s=6.0))
    _assert_gone(info.value.pids)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_cli_fault_exit_code_and_message(tmp_path):
    plan = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)])
    path = tmp_path / "plan.json"
    plan.save(path)
    out = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "planner.cli", "replay", str(path), "--fault", "die:0",
                          "--timeout", "5", "--out", str(out)], capture_output=True, text=True, timeout=50)
    assert run.returncode == 3
    assert run.stderr.startswith("error: replay failed: rank 0 died")
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_interleaved_replay_alternates_the_plans_steps(tmp_path):
    from planner.replay import replay_interleaved
    from planner.replay.predict import simulate_plan_as_run

    cfg = tiny_config(tmp_path)
    plans = [make_plan(cfg, PLANS[k][0](), PLANS[k][1]) for k in ("1f1b-iw", "fused")]
    results = replay_interleaved(plans, _opts(steps=3))
    assert len(results) == 2
    for plan, res in zip(plans, results):
        rep = res.report
        assert rep["grad_check"]["passed"], rep["grad_check"]
        assert rep["predicted"]["step_time_s"] == pytest.approx(simulate_plan_as_run(plan)[0]["step_time_s"])
        assert len(rep["measured"]["step_times_s"]) == 3
        d = rep["decomposition"][0]["difference_s"]
        assert d["step"] == pytest.approx(d["first_start"] + d["busy"] + d["gaps"] + d["tail"])
        assert rep["calibration"]["samples"]["steps"] == 3
    a, b = (r.report["measured"]["step_starts_s"] for r in results)
    assert a[0] < b[0] < a[1] < b[1] < a[2] < b[2]
