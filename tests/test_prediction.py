"""One prediction behind every figure: a plan, the degree search's estimate and a re-plan
report step, MFU, tokens/s, exposed DP and Adam time from ``planner.planning.prediction``."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.api import plan, resolve_cluster
from planner.core.hf_config import load_model
from planner.core.layer_math import model_flops_per_token
from planner.planning.dp_step import plan_prediction
from planner.planning.estimate import estimate_step
from planner.replanning import replan
from planner.replanning.inputs import plan_cluster, plan_model

ROUTING = Path(__file__).resolve().parent.parent / "examples" / "routing"


def _whole_step_figures(pred: dict, model, cluster) -> None:
    """MFU and tokens/s are over the whole optimizer step (schedule + exposed DP + Adam)."""
    tr = cluster.training
    tokens = tr.global_batch * tr.seq_len
    step = pred["optimizer_step_time_s"]
    assert step == pytest.approx(pred["step_time_s"] + pred["dp_exposed_s"] + pred["optimizer_s"], rel=1e-12)
    assert pred["mfu"] * step * cluster.num_gpus * cluster.gpu.peak_flops == pytest.approx(
        tokens * model_flops_per_token(model, tr.seq_len), rel=1e-12)
    assert pred["tokens_per_s_per_gpu"] * step * cluster.num_gpus == pytest.approx(tokens, rel=1e-12)


def test_a_plan_records_the_one_prediction_over_the_whole_step():
    model = load_model("llama3-8b")
    cluster = resolve_cluster(model, None, pp=2)
    made = plan("llama3-8b", pp=2, work=1)
    assert made.predicted.dp_exposed_s + made.predicted.optimizer_s > 0
    _whole_step_figures(made.predicted, model, cluster)
    assert plan_prediction(made, model, cluster).as_fields().items() <= made.predicted.items()


def test_estimate_and_plan_agree_where_their_schedules_agree():
    """One stage (pp 1, no EP): the closed-form screen and the planned schedule both run M
    microbatches back to back, so every figure of the one prediction must match."""
    model = load_model("llama3-8b")
    cluster = resolve_cluster(model, None, pp=1, recompute="full")
    est = estimate_step(model, cluster, overlap=False)
    made = plan("llama3-8b", pp=1, recompute="full", work=1).predicted
    assert est.pipeline_s == pytest.approx(made["step_time_s"], rel=1e-9)
    assert (est.dp_exposed_s, est.optimizer_s) == pytest.approx((made["dp_exposed_s"], made["optimizer_s"]), rel=1e-9)
    assert (est.step_s, est.mfu) == pytest.approx((made["optimizer_step_time_s"], made["mfu"]), rel=1e-9)
    assert est.peak_memory_bytes == max(made["peak_memory_bytes"])


def test_a_replan_reports_the_one_prediction_of_the_plan_it_chose():
    base = plan(schedule="1f1b")
    new = replan(base, [ROUTING / "hot_late.jsonl"]).plan
    model, cluster = plan_model(new), plan_cluster(new)
    _whole_step_figures(new.predicted, model, cluster)
    assert plan_prediction(new, model, cluster).as_fields().items() <= new.predicted.items()
