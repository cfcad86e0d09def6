"""The what-if benchmark changes one physical input per plan, through a cluster file the user's
loader accepts, and nothing else: ``benchmarks/published_whatif.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_modules import load_benchmark
from planner.core.cluster import cluster_from_dict
from planner.core.hardware import GPU_PRESETS

ROOT = Path(__file__).resolve().parents[1]
PP1_ROW = "automodel-20251008-h100-qwen3-30b-a3b-8gpu"
"""No pipeline, EP 8 inside one H100 node: its step holds every all-to-all."""
B200_ROW = "mb-25.09-b200-llama3-8b-8gpu"


@pytest.fixture(scope="module")
def whatif():
    return load_benchmark("published_whatif", "published_whatif_t")


def _row(whatif, row_id: str) -> dict:
    return next(r for r in whatif._sibling("published_rows").load_rows() if r["id"] == row_id)


def _careful(whatif, row: dict) -> dict:
    return whatif._sibling("published").cluster_data(row, "careful")


def test_a2a_change_is_a_gpu_mapping_the_loader_reads_with_only_that_field_changed(whatif):
    row = _row(whatif, PP1_ROW)
    data = whatif.cluster_change("a2a-nvlink4", _careful(whatif, row))
    assert whatif.constants_change("a2a-nvlink4") is None
    gpu = cluster_from_dict(data).gpu
    assert gpu.a2a_intranode_bandwidth == whatif.A2A_NVLINK4
    shipped = GPU_PRESETS["h100"]
    assert {k: v for k, v in vars(gpu).items() if k != "a2a_intranode_bandwidth"} == \
        {k: v for k, v in vars(shipped).items() if k != "a2a_intranode_bandwidth"}


def test_a2a_change_leaves_gpus_without_nvlink4_alone(whatif):
    row = _row(whatif, B200_ROW)
    before = _careful(whatif, row)
    data = whatif.cluster_change("a2a-nvlink4", before)
    assert data == before


def test_gemm_change_is_the_scale_of_the_curve_fitted_to_the_h200_rates(whatif):
    gemms = json.loads(whatif.H200_RESULTS.read_text())["gemms"]
    scale = whatif._sibling("gpu_check").shape_curves(gemms)["bf16"]["scale"]
    row = _row(whatif, PP1_ROW)
    data, cal = whatif.cluster_change("gemm-measured", _careful(whatif, row)), whatif.constants_change("gemm-measured")
    assert data == _careful(whatif, row)
    assert cal.gemm_eff_max == scale and scale > 0.9  # a large BF16 GEMM ran at 0.81 of peak


def test_a_faster_all_to_all_speeds_up_a_row_whose_step_holds_its_all_to_alls(whatif, tmp_path):
    row = _row(whatif, PP1_ROW)
    shipped = whatif.plan_changed((row, "shipped", 1))
    published = whatif._sibling("published")
    assert shipped == published.plan_row(row, "careful", work=1, folder=tmp_path)
    faster = whatif.plan_changed((row, "a2a-nvlink4", 1))
    assert faster["ratio"] > shipped["ratio"] * 1.05
    free = whatif.plan_changed((row, "no-a2a", 1))
    assert free["ratio"] > faster["ratio"]
    # published.py --change plans the same changed file (the refit's path)
    assert published.plan_many([(row, "careful", None)], work=1, jobs=1, change="a2a-nvlink4") == [faster]


def test_published_refuses_a_change_without_the_careful_way():
    done = subprocess.run([sys.executable, "benchmarks/published.py", "--change", "no-a2a", "--ways", "plain"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: --change: applies to the careful way only (add careful to --ways)"]
