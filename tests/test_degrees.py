"""Degree search: ``plan(..., gpus=N)`` / ``ppplan plan MODEL --gpus N``."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from planner.api import plan
from planner.cli.summary import cut_lines
from planner.core.cluster import default_cluster_path, load_cluster
from planner.core.errors import NOT_PROVEN, BudgetExhausted, InputError
from planner.core.hf_config import load_model
from planner.core.plan import without_wall_s
from planner.planning.degrees import degree_table, search_degrees, why_first
from solvers.schedule.search.budget import WallBudget


def _shipped(model: str):
    return load_model(model), load_cluster(default_cluster_path(model))


def _expired():
    """A wall deadline that passed a second ago (the cut is certain, not timed)."""
    return WallBudget(1e-6, start=time.perf_counter() - 1.0).phase("degree screen")


def test_search_returns_memory_feasible_configurations_fastest_first():
    spec, base = _shipped("qwen3-30b-a3b")
    ranked = search_degrees(spec, base, 16).ranked
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
    spec, base = _shipped("deepseek-v3")
    with pytest.raises(InputError, match=r"--gpus: no tp/pp/vpp/ep/cp/dp/micro-batch combination of 8 GPUs fits"):
        search_degrees(spec, base, 8)


def test_plan_with_gpus_plans_the_best_fully_and_records_the_table():
    p = plan("llama3-8b", gpus=8, work=2.0)
    section = p.solver.degrees
    assert section["gpus"] == 8 and len(section["table"]) >= 2
    planned = [x for x in section["fully_planned"] if x["step_time_s"] is not None]
    # configurations are compared on the whole optimizer step: schedule + exposed DP traffic + Adam
    assert p.predicted.optimizer_step_time_s == pytest.approx(min(x["step_time_s"] for x in planned))
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
    spec, base = _shipped("deepseek-v3")
    for d in search_degrees(spec, base, 1024).ranked:
        p, t = d.cluster.parallel, d.cluster.training
        assert p.vpp == 1 or (t.global_batch // (p.dp * t.micro_batch_size)) % p.pp == 0, d.label


# --- the screen's budget: a share of --work, cut by --time-limit -------------------------------

def test_screen_stops_at_its_share_of_work_and_says_so():
    spec, base = _shipped("deepseek-v3")
    small = search_degrees(spec, base, 1024, work=0.3)
    rec = small.record()
    assert rec["work_cut"] and not rec["wall_cut"]
    assert 1 <= rec["screened"] < rec["candidates"]
    # counted before each candidate: at most one candidate's work past the share
    assert rec["work_units"] <= rec["allowed_units"] + rec["candidate_units_max"]
    assert small.ranked and all(d.estimate.fits for d in small.ranked)
    again = search_degrees(spec, base, 1024, work=0.3)
    assert [d.label for d in again.ranked] == [d.label for d in small.ranked]  # counted, not timed
    more = search_degrees(spec, base, 1024, work=0.6).record()
    assert more["screened"] > rec["screened"]


def test_screen_with_enough_work_screens_every_candidate():
    spec, base = _shipped("qwen3-30b-a3b")
    rec = search_degrees(spec, base, 16, work=100.0).record()
    assert rec["screened"] == rec["candidates"] and not rec["work_cut"] and not rec["wall_cut"]


def test_wall_cap_cuts_the_screen_and_keeps_one_that_fits():
    spec, base = _shipped("qwen3-30b-a3b")
    search = search_degrees(spec, base, 16, deadline=_expired())
    rec = search.record()
    assert rec["wall_cut"] and rec["screened"] < rec["candidates"]
    assert len(search.ranked) >= 1 and all(d.estimate.fits for d in search.ranked)


def test_passed_deadline_keeps_screening_until_one_fits_and_never_claims_none_does_early():
    spec, base = _shipped("deepseek-v3")
    with pytest.raises(InputError, match="no tp/pp/vpp/ep/cp/dp/micro-batch combination of 8 GPUs fits"):
        search_degrees(spec, base, 8, deadline=_expired())  # every candidate examined: none fits
    rec = search_degrees(spec, base, 1024, deadline=_expired()).record()
    assert rec["wall_cut"] and rec["screened"] < rec["candidates"]


def test_no_full_plan_after_a_cut_screen_is_budget_exhausted(monkeypatch):
    from planner.core.errors import InfeasibleError
    from planner.planning import degree_plans

    def infeasible(*args, **kwargs):
        raise InfeasibleError("stage 0 needs 90 GiB of 72 GiB")

    spec, base = _shipped("llama3-8b")
    with pytest.raises(BudgetExhausted, match=NOT_PROVEN):
        degree_plans.plan_for_gpus(infeasible, "llama3-8b", spec, base, 8, work=0.01, time_limit=None, options={})
    with pytest.raises(InfeasibleError, match="none of the 2 best degree choices") as exc:
        degree_plans.plan_for_gpus(infeasible, "llama3-8b", spec, base, 8, work=100.0, time_limit=None, options={})
    assert not isinstance(exc.value, BudgetExhausted)


def test_plan_records_the_screen_cut_in_its_budget_and_summary():
    p = plan("llama3-8b", gpus=8, work=1.0, time_limit=1e-3)
    budget = p.solver.budget
    assert budget["bound"] and budget["cut_phases"][0] == "degree screen"
    assert budget["time_limit_s"] == 1e-3
    assert p.solver.degrees["screen"]["wall_cut"]
    first = cut_lines(p)[0]
    assert "--time-limit 0.001 s" in first and "degree screen" in first


def test_plan_with_gpus_is_the_same_plan_run_to_run():
    """Only ``wall_s`` fields may differ: the screen is counted, not timed."""
    one, two = (plan("llama3-8b", gpus=8, work=1.0) for _ in range(2))
    assert without_wall_s(one.to_dict()) == without_wall_s(two.to_dict())
    screen = one.solver.degrees["screen"]
    assert screen["allowed_units"] > 0 and screen["work_units"] > 0
