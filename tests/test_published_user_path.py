"""The published-runs benchmark predicts through the user's path: for a row, its figures are
what ``ppplan plan MODEL --cluster FILE --target T`` prints for that row's cluster file, and
it gets them by calling the function the CLI calls; every row has a loadable cluster file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmark_modules import load_benchmark
import planner.api
from planner.core.cluster import load_cluster
from planner.core.hf_config import load_model

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "published_runs.json"
ROW = "mb-26.04-qwen3-30b-a3b"
"""A row that plans in a few seconds (pp 1, EP 16)."""
PIPELINED = "mb-25.11-qwen3-235b-a22b"
"""A pipelined row (pp 8 x vpp 4): the closed-form screen's even partition and bubble formula
predict it differently from the planned schedule, so any other path shows."""


def _rows() -> list[dict]:
    module = load_benchmark("published_rows", "published_rows_t")
    return module.load_rows() + module.load_memory_only_rows()


def _benchmark(monkeypatch, calls: list):
    """``benchmarks/published.py`` imported with ``planner.api.plan`` recording its calls."""
    real = planner.api.plan

    def recording(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(planner.api, "plan", recording)
    return load_benchmark("published", "published_bench")  # executed afresh: binds the recording plan


def _printed(out: str) -> dict:
    """Step, optimizer step, MFU and largest per-rank peak from ``ppplan plan``'s summary."""
    step = re.search(r"predicted step (\S+) s .* MFU (\S+)", out)
    opt = re.search(r"optimizer step (\S+) s =", out)
    peaks = [float(m.group(1)) for m in re.finditer(r"^\s+\d+\s+(\d+\.\d)\s+\d+\.\d", out, re.M)]
    return {"step": step.group(1), "mfu": step.group(2), "optimizer_step": opt.group(1),
            "peak_gib": f"{max(peaks):.1f}"}


@pytest.mark.parametrize("row_id", [ROW, PIPELINED])
def test_benchmark_prints_what_ppplan_plan_prints_for_the_rows_file(ppplan, monkeypatch, tmp_path, row_id):
    row = next(r for r in _rows() if r["id"] == row_id)
    calls: list = []
    bench = _benchmark(monkeypatch, calls)
    got = bench.plan_row(row, "careful", work=1, folder=tmp_path)
    assert len(calls) == 1, "the benchmark must plan through planner.api.plan, as ppplan plan does"
    args, kwargs = calls[0]
    assert args == (bench.row_model(row),) and kwargs["target"] == row["target"]
    cli = ppplan("plan", row["model"], "--cluster", str(ROOT / "benchmarks" / "data" / row["cluster"]),
                 "--target", row["target"], "--work", "1", "--out", "p.json")
    assert cli.code == 0, cli.err
    printed = _printed(cli.out)
    assert {k: got[k] for k in printed} == printed
    plan = json.loads((tmp_path / "p.json").read_text())
    tokens = row["gbs"] * row["seq_len"] / plan["predicted"]["optimizer_step_time_s"] / row["num_gpus"]
    assert got["tokens_per_s_per_gpu"] == pytest.approx(tokens, rel=1e-12)


def test_plain_and_recipe_files_keep_only_what_a_plain_user_writes(monkeypatch):
    bench = _benchmark(monkeypatch, [])
    row = next(r for r in _rows() if r["id"] == ROW)
    plain = bench.cluster_data(row, "plain")
    assert set(plain) <= {"gpu", "num_gpus", "gpus_per_node", "parallel", "training"}
    assert set(plain["training"]) <= {"global_batch", "seq_len", "micro_batch_size"}
    careful = bench.cluster_data(row, "careful")
    recipe = bench.cluster_data(row, "recipe")
    assert recipe == {**plain, "recipe": row["cluster_recipe"],
                      "training": {**plain["training"], "precision": careful["training"]["precision"]}}


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r["id"])
def test_every_row_has_a_cluster_file_matching_its_published_layout(row):
    model = str(DATA.parent / row["model_config"]) if "model_config" in row else row["model"]
    spec = load_cluster(DATA.parent / row["cluster"]).check_against(load_model(model))
    p, t = spec.parallel, spec.training
    assert (spec.num_gpus, p.pp, p.tp, p.ep, t.global_batch, t.seq_len, t.micro_batch_size) == \
        (row["num_gpus"], row["pp"], row["tp"], row["ep"] or 1, row["gbs"], row["seq_len"], row["mbs"])
    assert p.vpp == (row.get("vp") or 1) and t.precision == ("fp8" if "FP8" in row["precision"] else "bf16")
    assert row["target"] in ("megatron", "torch") and row["cluster_recipe"] in ("megatron", "torchtitan", "none")
    assert row["family"] and row["source"]
    if "measured_tokens_per_s_per_gpu" in row:  # a throughput row cites its page and table
        assert row["source_url"].startswith("https://") and row.get("table", row["source"])


_SELECTIVE_RUN = {"mb-25.09-deepseek-v3": "the 25.09 recipe ran the default selective set; the modules it names "
                                          "are the 25.11 preset's"}
"""Rows whose recipe text names modules their run did not recompute."""


@pytest.mark.parametrize("row", [r for r in _rows() if r["id"] not in _SELECTIVE_RUN
                                 and re.search(r"\b(core_attn|moe_act|layernorm|mla_up_proj|mlp|moe|shared_experts)\b",
                                               str((r.get("recipe") or {}).get("recompute", "")))],
                         ids=lambda r: r["id"])
def test_a_row_whose_run_names_its_recompute_modules_plans_with_them(row):
    """The cluster file of a run that recomputed Megatron modules names the same modules."""
    from planner.core.recompute import MODULES, modules_of

    text = str(row["recipe"]["recompute"])
    named = {m for m in MODULES if re.search(rf"\b{m}\b", text)}
    mode = load_cluster(DATA.parent / row["cluster"]).training.recompute
    assert set(modules_of(mode)) == named, (row["id"], mode)
