"""``benchmarks/vs_oobleck.py`` without Oobleck's tree: it imports, refuses a folder without
Oobleck's simulator in one line (exit 2), and weighs ppplan's table by the trace's live counts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.benchmark_modules import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _vs_oobleck():
    """The script's sibling first (a script finds it beside itself; a loaded module in sys.modules)."""
    load_benchmark("oobleck_rule")
    return load_benchmark("vs_oobleck")


def test_a_folder_without_the_simulator_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/vs_oobleck.py", "--oobleck-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--oobleck-dir: no tools/simulator/oobleck_simulator.py under" in done.stderr


def test_trace_mean_weighs_each_count_by_its_time(tmp_path):
    """31 instances (counted as 30, as the simulator does) for 100 s, then 29 for 300 s."""
    traces = tmp_path / "tools" / "simulator" / "traces"
    traces.mkdir(parents=True)
    rows = [f"0,add,node{k}" for k in range(1, 32)] + ["100,remove,node1", "100,remove,node2", "400,remove,node3"]
    (traces / "t.csv").write_text("\n".join(rows) + "\n")
    table = {n: float(n) for n in range(15, 31)}
    assert _vs_oobleck().trace_mean(tmp_path, "t", table) == (100 * 30 + 300 * 29) / 400


def test_oobleck_rule_covers_every_node_and_ends_pipelines_together():
    """Templates of 2 and 3 nodes (a = 0): 5 nodes take one of each, and the batch is split
    in proportion to speed, so the step is batch / (1/b2 + 1/b3); 1 node has no cover."""
    rule = load_benchmark("oobleck_rule")
    costs = {2: (0.0, 0.4), 3: (0.0, 0.25)}
    step, combo = rule.instantiate(5, costs, 1024)
    assert combo == {2: 1, 3: 1} and abs(step - 1024 / (1 / 0.4 + 1 / 0.25)) < 1e-9
    assert rule.instantiate(1, costs, 1024) is None
    assert rule.instantiate(6, costs, 1024) == (1024 / (2 / 0.25), {3: 2})  # beats three 2-node pipelines
