"""MFU against a fixed, stated peak: on CPU the one ``ppplan profile`` measured once and
stored in the profile, read by the replay (``--profile``), never measured at its start-up;
a plan made from a CPU profile reports no MFU against a GPU peak."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from planner.core.costs_io import load_costs, save_costs
from planner.core.errors import InputError
from solvers.schedule.families.generators import one_f_one_b

from test_replay import _table  # noqa: E402  (same tests folder)
from test_replay_run import SEQ, make_plan, tiny_config  # noqa: E402


def _profile(tmp_path, meta):
    path = tmp_path / "p.json"
    save_costs(replace(_table(7), meta=meta), path)
    return str(path)


STORED = {"flops_per_s": 4.0e10, "threads": 1, "method": "best FP32 512x512 matmul over 1 s",
          "measured_at": "2026-01-02T03:04:05Z", "load_average_1min": 0.25, "cores": 2}


def test_the_stored_cpu_peak_is_the_denominator_and_says_where_it_came_from(tmp_path):
    from planner.replay.device import replay_peak

    path = _profile(tmp_path, {"cpu_peak": STORED})
    peak = replay_peak(torch.device("cpu"), path)
    assert peak.flops_per_s == STORED["flops_per_s"]
    assert peak.label.startswith(f"measured CPU peak stored in profile {path} at 2026-01-02T03:04:05Z")
    none = replay_peak(torch.device("cpu"), None)
    assert none.flops_per_s is None and "pass --profile" in none.label


def test_a_profile_without_a_stored_peak_is_refused_before_the_replay(tmp_path):
    from planner.replay import ReplayOptions

    with pytest.raises(InputError, match=r"--profile: .* stores no CPU peak .*ppplan profile --device cpu"):
        ReplayOptions(profile=_profile(tmp_path, {})).check()


def test_a_plan_from_a_cpu_profile_reports_no_mfu_against_a_gpu_peak(tmp_path):
    from planner.replay.predict import simulate_on_table

    cpu = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)])
    cpu.predicted = replace(cpu.predicted, mfu=6e-7)  # CPU times divided by the cluster's GPU peak
    pred, _ = simulate_on_table(cpu, _table(7))
    assert pred["plan"]["mfu"] is None
    gpu = make_plan(tiny_config(tmp_path), one_f_one_b(2, 4), [(0, 4), (4, 7)],
                    costs={"source": "analytical", "device": "h100", "scale": 1.0, "seq_len": 4096})
    gpu.predicted = replace(gpu.predicted, mfu=0.4)
    assert simulate_on_table(gpu, _table(7))[0]["plan"]["mfu"] == 0.4


def test_measured_peak_is_a_best_matmul_rate_with_its_load():
    from profiler.cpu_peak import measure_cpu_peak

    got = measure_cpu_peak(1, n=128, seconds=0.05)
    assert got["flops_per_s"] > 1e6 and got["threads"] == 1 and got["measured_at"].endswith("Z")
    assert got["load_average_1min"] >= 0 and torch.get_num_threads() >= 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_profile_stores_the_peak_and_the_replay_divides_by_it(ppplan, tmp_path):
    cfg = tiny_config(tmp_path)
    res = ppplan("profile", cfg, "--device", "cpu", "--scale", "1", "--seq-len", str(SEQ), "--repeats", "1",
                 "--warmup", "0", "--threads", "1", "--no-links", "--quiet", "--out", "p.json")
    assert res.code == 0, res.err
    stored = load_costs(tmp_path / "p.json").meta["cpu_peak"]
    assert stored["flops_per_s"] > 0 and stored["threads"] == 1
    plan = make_plan(cfg, one_f_one_b(2, 4), [(0, 4), (4, 7)])
    plan.save(tmp_path / "plan.json")
    res = ppplan("replay", "plan.json", "--steps", "2", "--warmup", "0", "--threads", "1", "--no-grad-check",
                 "--profile", "p.json", "--out", "r.json")
    assert res.code == 0, res.err
    m = json.loads((tmp_path / "r.json").read_text())["measured"]
    assert m["peak_flops_per_device"] == stored["flops_per_s"]  # not re-measured at start-up
    assert m["peak_flops_source"].startswith("measured CPU peak stored in profile p.json")
    assert m["mfu"] == pytest.approx(m["model_flops_per_step"] / (m["step_time_s"] * 2 * stored["flops_per_s"]))
    assert "peak: measured CPU peak stored in profile p.json" in res.out
