"""``benchmarks/gpu_check.py --dry-run``: the GPU check's code on the CPU at a tiny width
(issue 16: the script that runs every CUDA path one GPU allows must not rot without a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(180)
def test_dry_run_writes_every_section(tmp_path):
    out = tmp_path / "gpu_check.json"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_check.py"), "--dry-run",
                          "--out", str(out)], capture_output=True, text=True, timeout=170, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    data = json.loads(out.read_text())
    assert data["dry_run"] and data["device"] == "cpu" and "EMULATED" in data["link"]
    assert set(data["models"]) == {"qwen3-next-80b-a3b", "deepseek-v3"}
    trace = data["trace_import"]  # examples/trace_hook.py's loop traced and read back, beside the profile
    assert isinstance(trace, dict), trace
    assert trace["clock"] == ["host"] and set(trace["layer_types"]) == {"embedding", "gqa+moe", "head"}
    assert all(r["trace_f"] > 0 and r["profile_f"] > 0 for r in trace["layer_types"].values())
    for name, m in data["models"].items():
        types = m["measured"]["layer_types"]
        assert set(types) == set(m["analytical"]["layer_types"]), name
        moe = [t for t in types if t.endswith("moe")]
        assert moe and all(types[t]["f"] > 0 and types[t]["w"] > 0 for t in types)
        assert all(types[t]["a2a_f"] > 0 for t in moe), "the side-stream link moved no bytes"
        assert all(types[t]["b"] > 0 for t in types if t != "embedding")   # the full backward, timed
        padded = m["measured_capacity_padded"]["layer_types"]
        assert set(padded) == set(moe) and all(padded[t]["f"] > 0 and padded[t]["b"] > 0 for t in moe)
        assert set(m["plans"]) == {"overlap", "serial"}
        for p in m["plans"].values():
            assert p["simulate"]["step_time_s"] > 0
            assert [r["layers"] for r in p["stage_pairs"]] == p["stages"]
            assert all(r["measured_fused_s"] > 0 and r["predicted_fused_s"] > 0 for r in p["stage_pairs"])


def test_side_stream_link_moves_the_same_rows():
    from profiler.layers.program import SideStreamLink, all_to_all

    x = torch.arange(12.0).view(4, 3)
    out, work = all_to_all(x, [4], [4], SideStreamLink(), async_op=True)
    work.wait()
    assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()
