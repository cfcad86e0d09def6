"""``ppplan plan`` schedule options and bring-your-own-costs, through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "costs" / "four_stages.json"


def _plan(tmp_path, *args):
    out = tmp_path / "plan.json"
    run = subprocess.run([sys.executable, "-m", "planner.cli", "plan", *args, "--out", str(out), "--quiet"],
                         capture_output=True, text=True, timeout=180, cwd=tmp_path)
    return run, out


def test_bring_your_own_costs_plans_and_validates(tmp_path):
    run, out = _plan(tmp_path, "--profile", str(EXAMPLE), "--pp", "4", "--microbatches", "8",
                     "--memory-limit", "4mb", "--work", "1")
    assert run.returncode == 0, run.stderr
    data = json.loads(out.read_text())
    pred, sched = data["predicted"], data["solver"]["schedule_solver"]
    assert pred["lower_bound_s"] <= pred["step_time_s"]
    assert sched["gap"] == pytest.approx(pred["step_time_s"] / pred["lower_bound_s"] - 1)
    assert pred["memory_limit"] == "4mb" and len(data["stages"]) == 4
    val = subprocess.run([sys.executable, "-m", "planner.cli", "validate", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert val.returncode == 0, val.stderr


@pytest.mark.parametrize("args,match", [
    (["--memory-limit", "0.5mb"], "--memory-limit: '0.5mb' is below one microbatch"),
    (["--memory-limit", "20GiB"], "memory"),
    (["--memory-limit", "lots"], "--memory-limit: cannot read"),
    (["--deadline", "0W3=0.01"], "task 0W3 is 0.01 s but it cannot finish before"),
    (["--deadline", "W=0.3"], "earliest possible finish"),
    (["--time-limit", "0"], "--time-limit"),
    (["--seed", "-1"], "--seed"),
    (["--schedule", "zbv"], "zbv supports vpp 2"),
    (["--schedule", "nope"], "--schedule"),
])
def test_bad_schedule_input_exits_2(tmp_path, args, match):
    run, out = _plan(tmp_path, "--profile", str(EXAMPLE), "--pp", "4", "--microbatches", "8", *args)
    assert run.returncode == 2, run.stdout + run.stderr
    assert match in run.stderr and "Traceback" not in run.stderr
    assert not out.exists()


def test_profile_without_model_needs_pp(tmp_path):
    run, _ = _plan(tmp_path, "--profile", str(EXAMPLE), "--microbatches", "8")
    assert run.returncode == 2 and "--pp: is required" in run.stderr
