"""``ppplan replan`` end to end: output plan, never overwriting inputs, bad traces exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.api import plan as default_plan
from planner.core.hf_config import load_model
from profiler.routing import load_routing

ROUTING = Path(__file__).resolve().parent.parent / "examples" / "routing"


def _ppplan(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("replan") / "plan.json"
    default_plan().save(path)
    return path


def test_replan_writes_new_plan_and_report(plan_file, tmp_path):
    out = tmp_path / "new.json"
    run = _ppplan("replan", str(plan_file), "--routing", str(ROUTING / "hot_late.jsonl"),
                  "--out", str(out), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "imbalance then -> now" in run.stdout and "recommendation" in run.stdout
    data = json.loads(out.read_text())
    assert data["replan"]["recommended"] is True and data["routing"]["traces"]
    assert _ppplan("validate", str(out), cwd=tmp_path).returncode == 0
    as_json = _ppplan("replan", str(plan_file), "--routing", str(ROUTING / "hot_late.jsonl"),
                      "--out", str(tmp_path / "again.json"), "--json", cwd=tmp_path)
    assert json.loads(as_json.stdout)["new_step_time_s"] == data["replan"]["new_step_time_s"]


def test_never_overwrites_the_input_plan(plan_file, tmp_path):
    before = plan_file.read_bytes()
    run = _ppplan("replan", plan_file.name, "--routing", str(ROUTING / "start.json"),
                  "--out", f"./{plan_file.name}", cwd=plan_file.parent)
    assert run.returncode == 2
    assert "--out" in run.stderr and "never overwritten" in run.stderr
    assert plan_file.read_bytes() == before


def test_bad_trace_is_one_line_exit_2(plan_file, tmp_path):
    bad = tmp_path / "bad.jsonl"
    good = {"iter": 1, "block": "decoder", "layer": 1, "tpe": [[10] * 64] * 8}
    worse = {**good, "layer": 2, "tpe": [[-3] + [10] * 63] + [[10] * 64] * 7}
    bad.write_text(json.dumps(good) + "\n" + json.dumps(worse) + "\n")
    out = tmp_path / "new.json"
    run = _ppplan("replan", str(plan_file), "--routing", str(bad), "--out", str(out), cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0
    assert "bad.jsonl:2: tpe: negative token count -3" in run.stderr
    assert not out.exists()


SHIPPED = Path(__file__).resolve().parent.parent / "plans" / "examples" / "qwen3-next-80b-a3b.default.plan.json"


@pytest.fixture(scope="module")
def megatron_logs(tmp_path_factory) -> Path:
    """``make_traces.py --megatron-dir``: the shipped plan's run logging the hot_late routing."""
    out = tmp_path_factory.mktemp("megatron")
    run = subprocess.run([sys.executable, str(ROUTING / "make_traces.py"), "--out-dir", str(out),
                          "--megatron-dir", str(out / "logs"), "--plan", str(SHIPPED), "--megatron-trace", "hot_late"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert (out / "hot_late.jsonl").read_bytes() == (ROUTING / "hot_late.jsonl").read_bytes()
    return out / "logs" / "hot_late"


def test_shipped_plan_replans_from_megatron_logs(megatron_logs, tmp_path):
    out = tmp_path / "new.json"
    run = _ppplan("replan", str(SHIPPED), "--routing", str(megatron_logs), "--out", str(out), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "imbalance then -> now" in run.stdout and "recommendation" in run.stdout
    routing = json.loads(out.read_text())["routing"]
    single = load_routing([ROUTING / "hot_late.jsonl"], load_model("qwen3-next-80b-a3b"), ep=8)
    assert routing["format"] == "megatron" and routing["iterations"] == list(single.iterations)
    assert routing["imbalance"] == {str(k): v for k, v in sorted(single.imbalance.items())}
    assert _ppplan("validate", str(out), cwd=tmp_path).returncode == 0


def test_bad_megatron_logs_exit_2(megatron_logs, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    for path in sorted(megatron_logs.iterdir())[:-1]:
        (partial / path.name).write_bytes(path.read_bytes())
    out = tmp_path / "new.json"
    for args, message in (([str(partial)], "no log for rank(s)"),
                          ([str(megatron_logs), "--routing-format", "json"], "a folder is a Megatron log, not json"),
                          ([str(megatron_logs / "rank0.jsonl")], "no log for rank(s) 1, 2, 3")):
        run = _ppplan("replan", str(SHIPPED), "--routing", *args, "--out", str(out), cwd=tmp_path)
        assert run.returncode == 2 and message in run.stderr, run.stderr
        assert run.stderr.strip().count("\n") == 0 and not out.exists()
