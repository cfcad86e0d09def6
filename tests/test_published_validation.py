"""The published-runs validation: the L1 fit on its surrogate, the held-out folds planned
through the user's path with the fold's constants, the rank correlation, and the rows."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from benchmark_modules import load_benchmark
from profiler.cost_model.fitted import BOUNDS, FITTED, active_constants, using_constants

fit = load_benchmark("published_fit", "t_published_fit")
rows_mod = load_benchmark("published_rows", "t_published_rows")


def test_l1_fit_recovers_the_constants_a_linear_surrogate_was_made_from():
    truth = {"gemm_eff_max": 0.1, "grouped_gemm_eff": -0.2, "moe_layer_overhead_s": 0.05,
             "elementwise_eff": -0.4}  # ln offsets
    slopes = {f"r{k}": {"gemm_eff_max": 1.0 - 0.1 * k, "grouped_gemm_eff": 0.3 * (k % 3),
                        "moe_layer_overhead_s": -0.05 * (k % 4), "elementwise_eff": 0.1 + 0.07 * (k % 5)}
              for k in range(12)}
    # ln(pred/meas) at FITTED when the truth is FITTED * e^truth: -(slope . truth)
    ln0 = {r: -sum(s[n] * truth[n] for n in fit.FIT_NAMES) for r, s in slopes.items()}
    got = fit.fit_l1(FITTED, ln0, slopes, list(slopes))
    for name, off in truth.items():
        assert math.log(getattr(got, name) / getattr(FITTED, name)) == pytest.approx(off, abs=2e-3)


def test_l1_fit_stays_inside_the_physical_bounds_and_leaves_unused_constants_alone():
    slopes = {"a": {"gemm_eff_max": 1.0, "grouped_gemm_eff": 0.0, "moe_layer_overhead_s": 0.0, "elementwise_eff": 0.0}}
    got = fit.fit_l1(FITTED, {"a": -5.0}, slopes, ["a"])  # wants gemm_eff_max x e^5
    assert got.gemm_eff_max == pytest.approx(BOUNDS["gemm_eff_max"][1])
    assert got.grouped_gemm_eff == pytest.approx(FITTED.grouped_gemm_eff)


def test_spearman_ranks_with_ties_and_refuses_too_few_points():
    assert fit.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert fit.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert fit.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.8660254, rel=1e-6)
    assert fit.spearman([1], [1]) is None


def test_using_constants_sets_the_constants_the_cost_model_reads_and_restores_them():
    other = replace(FITTED, gemm_eff_max=0.7)
    with using_constants(other):
        assert active_constants() is other
    assert active_constants() is FITTED


def test_rows_have_unique_ids_a_family_and_more_than_thirty_new_published_measurements():
    rows = rows_mod.load_rows()
    assert len({r["id"] for r in rows}) == len(rows)
    new = [r for r in rows if r["row_file"] != rows_mod.FIRST.name]
    assert len(new) >= 30
    assert len({rows_mod.row_family(r) for r in rows}) >= 4
    for r in rows:
        assert r.get("memory_measure", "max_memory_allocated") in rows_mod.MEASURES, r["id"]


@pytest.mark.slow
def test_held_out_rows_are_planned_again_with_their_folds_constants(monkeypatch):
    bench = load_benchmark("published", "t_published")
    seen = []
    real = bench.plan_row

    def recording(row, way, *, work, folder, calibration=None, change=None):
        seen.append((row["id"], calibration))
        return real(row, way, work=work, folder=folder, calibration=calibration, change=change)

    monkeypatch.setattr(bench, "plan_row", recording)
    pick = {"mb-26.04-qwen3-30b-a3b", "torchtitan-8gpu-eager-llama3-8b"}
    res = bench.run(work=0.5, ways=("careful",), only=pick, with_held_out=True, jobs=1)
    assert set(res["families"]) == {"megatron-bridge-26.04", "torchtitan-2024-12"}
    for fam, fold in res["families"].items():
        # each fold is fitted on the other family's single row only
        assert fold["train_rows"] == 1
    held = {rid: cal for rid, cal in seen[-2:]}  # the held-out plans come last
    assert set(held) == pick
    for e in res["rows"]:
        consts = res["families"][e["family"]]["constants"]
        assert {n: getattr(held[e["id"]], n) for n in consts} == consts
        assert "tokens_per_s_per_gpu" in e["held_out"]


def test_page_tables_come_from_the_runs_json():
    tables = load_benchmark("published_tables", "t_published_tables")
    way = {"median_abs_ln": 0.1234, "planned": 2, "refused": 1, "ratio_min": 0.5, "ratio_max": 1.25}
    res = {"summary": {"held_out": way, "careful": {**way, "median_abs_ln": 0.1}},
           "families": {"fam": {**way, "constants": {"gemm_eff_max": 0.55, "moe_layer_overhead_s": 1.1e-3}}},
           "spearman": {"careful": {"m": {"rows": 4, "planned": 4, "spearman": 0.8}},
                        "held_out": {"m": {"rows": 4, "planned": 4, "spearman": None}}},
           "memory": [{"id": "a", "measure": "max_memory_reserved", "rank": "max", "measured_gib": 10.0,
                       "predicted_gib": 10.9, "ratio": 1.09},
                      {"id": "b", "measure": "max_memory_allocated", "rank": 0, "measured_gib": 10.0,
                       "predicted_gib": 11.2, "ratio": 1.12}],
           "rows": [{"id": "r", "family": "fam", "num_gpus": 8, "gpu": "h100", "measured": 866.77,
                     "careful": {"ratio": 1.004}, "held_out": {"refused": "memory"}}]}
    assert tables.ways(res)[2:] == ["| careful | 0.100 | 2 | 1 | 0.50-1.25 |",
                                    "| held_out | 0.123 | 2 | 1 | 0.50-1.25 |"]
    assert tables.families(res)[2] == "| fam | 2 | 1 | 0.123 | 0.50-1.25 | 0.5500 | 1.100 ms |"
    assert tables.spearman(res)[2] == "| m | 4 | 4 | 0.80 | - |"
    assert tables.memory(res)[0] == "1 of 2 within 10%:"
    assert tables.rows(res)[2] == "| r | fam | 8 h100 | 866.77 | 1.00 | refused |"


def test_held_out_fit_is_linearised_again_where_the_first_round_landed(monkeypatch):
    """A row's time is GEMM work over ``gemm_eff_max`` plus element-wise work over
    ``elementwise_eff`` (not linear in the logs of either): the second round measures its
    slopes at the constants the first fit on every row gave, and lands nearer the truth."""
    bench = load_benchmark("published", "t_published_rounds")
    truth = replace(FITTED, gemm_eff_max=0.82, elementwise_eff=0.2)
    shares = {f"r{k}": (1.0 + k, 0.3 * (k % 4)) for k in range(8)}  # GEMM and element-wise work per row

    def step(rid, cal):
        gemm, ew = shares[rid]
        return gemm / cal.gemm_eff_max + ew / cal.elementwise_eff

    def fake(row, way, *, work, folder, calibration=None, change=None):
        cal = calibration or FITTED
        return {"ratio": step(row["id"], truth) / step(row["id"], cal), "tokens_per_s_per_gpu": 1.0}

    monkeypatch.setattr(bench, "plan_row", fake)
    rows = [{"id": rid, "family": f"f{k % 2}"} for k, rid in enumerate(shares)]
    careful = {r["id"]: fake(r, "careful", work=0, folder=None) for r in rows}
    got = {n: bench.held_out(rows, careful, work=0, jobs=1, rounds=n) for n in (1, 2)}
    assert got[1]["linearised_at"]["gemm_eff_max"] == FITTED.gemm_eff_max
    assert got[2]["linearised_at"]["gemm_eff_max"] != FITTED.gemm_eff_max  # where round 1 landed

    def miss(res):
        return max(abs(math.log(res["fit_all_rows"][n] / getattr(truth, n))) for n in ("gemm_eff_max", "elementwise_eff"))

    assert miss(got[2]) < 0.5 * miss(got[1])
