"""Sailor's mixed A100/V100 setting in ppplan's terms: the V100 preset, the OPT-350 config in
the llama family, and ``benchmarks/vs_sailor.py``'s plan translation (runs without Sailor)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from planner.core.devices import parse_devices
from planner.core.hardware import GPU_PRESETS
from planner.core.hf_config import load_model
from tests.benchmark_modules import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def test_v100_preset_is_the_datasheet_part():
    v100 = GPU_PRESETS["v100"]
    assert (v100.peak_flops, v100.memory_bytes, v100.hbm_bandwidth) == (125e12, 32 * 2**30, 0.9e12)
    assert v100.nvlink_bandwidth == 150e9 and v100.fp8_peak_flops == 0.0  # 300 GB/s total, no FP8


def test_v100_16g_group_parses():
    groups = parse_devices("a100:32:40,v100:96:16")
    assert [g.gpu.memory_bytes for g in groups] == [40 * 2**30, 16 * 2**30]
    assert groups[1].gpu.peak_flops == 125e12


def test_opt350_as_llama_keeps_opt_sizes():
    spec = load_model(str(ROOT / "benchmarks/data/models/opt-350m-as-llama.json"))
    assert (spec.hidden, spec.vocab, len(spec.layers)) == (1024, 50272, 26)  # Sailor's num_all_layers: E, 24 t, L
    # OPT's ungated 1024 -> 4096 -> 1024 MLP as a gated one of the same weight count
    assert abs(3 * 1024 * spec.intermediate - 8 * 1024**2) / (8 * 1024**2) < 2e-4  # 0.012 percent


@pytest.fixture(scope="module")
def vs():
    return load_benchmark("vs_sailor")


def test_ppplan_plan_in_sailor_form(vs):
    row = {"tp": 1, "dp": 2, "mbs": 1,
           "stages": [{"layers": [0, 14], "device": "a100-40g"}, {"layers": [14, 26], "device": "v100-16g"}]}
    sailor = vs.to_sailor(row)
    pipe = sailor["pipeline_list"][0]
    assert pipe["layers_per_stage"][0] == list(range(14)) and pipe["layers_per_stage"][1][-1] == 25
    assert [s[0][0][0][0] for s in pipe["tmp_per_stage"]] == ["A100-40", "V100-16"]
    assert pipe["dp"] == [2, 2] and sailor["used_gpus"] == {"A100-40": 2, "V100-16": 2}


def test_mixed_stage_is_named(vs):
    row = {"pipelines": [{"layers": [13, 13], "dp": [64, 64],
                          "stages": [["A100-40 tp1", "V100-16 tp1"], ["V100-16 tp1"]]}]}
    assert "stage 0 mixes A100-40 tp1 and V100-16 tp1" in vs.expressible(row)
    row["pipelines"][0]["stages"][0] = ["A100-40 tp1"]
    assert vs.expressible(row) == ""


def test_missing_sailor_dir_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/vs_sailor.py", "--sailor-dir", str(tmp_path), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--sailor-dir: no sailor/Planner" in done.stderr and "Traceback" not in done.stderr
