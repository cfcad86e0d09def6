"""End-to-end smoke test of the main job on the shipped default."""

from __future__ import annotations

import json
import subprocess
import sys


def test_plan_default_writes_valid_plan(tmp_path):
    out = tmp_path / "plan.json"
    run = subprocess.run([sys.executable, "-m", "planner.cli", "plan", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    data = json.loads(out.read_text())
    assert data["model"]["name"] == "qwen3-next-80b-a3b"
    val = subprocess.run([sys.executable, "-m", "planner.cli", "validate", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert val.returncode == 0, val.stderr
