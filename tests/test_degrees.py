"""Degree search (issue 18): ``plan(..., gpus=N)`` / ``ppplan plan MODEL --gpus N``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from planner.api import plan
from planner.core.cluster import default_cluster_path, load_cluster
from planner.core.errors import InputError
from planner.core.hf_config import load_model
from planner.planning.degrees import degree_table, search_degrees, why_first


def test_search_returns_memory_feasible_configurations_fastest_first():
    spec = load_model("qwen3-30b-a3b")
    base = load_cluster(default_cluster_path("qwen3-30b-a3b"))
    ranked = search_degrees(spec, base, 16)
    assert 1 <= len(ranked) <= 10
    steps = [d.estimate.step_s for d in ranked]
    assert steps == sorted(steps)
    for d in ranked:
        p = d.cluster.parallel
        assert p.pp * p.tp * p.cp * p.dp == 16 and d.cluster.num_gpus == 16
        assert d.estimate.fits and d.estimate.peak_memory_bytes <= base.memory_limit_bytes
        assert spec.moe.num_experts % p.ep == 0 and (p.dp * p.tp * p.cp) % p.ep == 0
    rows = degree_table(ranked)
    assert rows[0]["rank"] == 1 and rows[0]["tokens_per_s_per_gpu"] >= rows[-1]["tokens_per_s_per_gpu"]
    assert ranked[0].label in why_first(ranked)


def test_too_few_gpus_is_one_clear_error():
    spec = load_model("deepseek-v3")
    with pytest.raises(InputError, match=r"--gpus: no tp/pp/vpp/ep/cp/dp/micro-batch combination of 8 GPUs fits"):
        search_degrees(spec, load_cluster(default_cluster_path("deepseek-v3")), 8)


def test_plan_with_gpus_plans_the_best_fully_and_records_the_table():
    p = plan("llama3-8b", gpus=8, work=2.0)
    section = p.solver["degrees"]
    assert section["gpus"] == 8 and len(section["table"]) >= 2
    planned = [x for x in section["fully_planned"] if x["step_time_s"] is not None]
    # configurations are compared on the whole optimizer step: schedule + exposed DP traffic + Adam
    assert p.predicted["optimizer_step_time_s"] == pytest.approx(min(x["step_time_s"] for x in planned))
    pred = p.predicted
    assert pred["optimizer_s"] > 0 and pred["dp_exposed_s"] >= 0
    assert pred["optimizer_step_time_s"] == pytest.approx(pred["step_time_s"] + pred["dp_exposed_s"]
                                                          + pred["optimizer_s"])
    par = p.parallel
    assert par["pp"] * par["tp"] * par["dp"] * par.get("cp", 1) == 8


def test_cli_rejects_gpus_with_explicit_degrees(tmp_path):
    out = tmp_path / "plan.json"
    r = subprocess.run([sys.executable, "-m", "planner.cli", "plan", "llama3-8b", "--gpus", "8", "--pp", "2",
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: --gpus: given together with --pp (pass --gpus alone (the search chooses every degree) "
        "or the degrees alone)"]
    assert not out.exists()


def test_interleaved_choices_have_microbatches_divisible_by_pp():
    """DeepSeek-V3 on 1024 GPUs: the search once ranked pp 8 x vpp 4 with 30 microbatches
    first, which the interleaved schedule cannot run, and no configuration got planned."""
    base = load_cluster(default_cluster_path("deepseek-v3"))
    ranked = search_degrees(load_model("deepseek-v3"), base, 1024)
    for d in ranked:
        p, t = d.cluster.parallel, d.cluster.training
        assert p.vpp == 1 or (t.global_batch // (p.dp * t.micro_batch_size)) % p.pp == 0, d.label
