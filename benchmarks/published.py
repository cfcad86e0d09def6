"""The analytical cost model against published training runs (issue 18's figures).

Rows: ``benchmarks/data/published_runs.json`` (Megatron-Bridge / NeMo performance
summaries, torchtitan, NeMo AutoModel; each row cites its source). Each row's
configuration becomes a cluster (GPU preset, degrees, batch, precision, dispatcher,
recomputation, FSDP) and ``planner.planning.estimate.estimate_step`` predicts its
tokens/s/GPU. Reported per row: predicted vs measured and the leave-one-out prediction
(constants fitted on every other row); summary: median |ln(pred / meas)| and Spearman
rank correlation, in-sample and leave-one-out; predicted vs measured peak memory for
every published peak (``memory_rows``); per model with several published configurations,
whether the estimate (what the degree search ranks by) orders them as measured
(``rank_orders``).

What each row's cluster says beyond its degrees and batch: the GPU (torchtitan's rows ran
on 96 GB HBM2e H100s at 500 W: ``h100-hbm2e-500w``), the kernels (torchtitan eager:
``kernels: eager``), CUDA graphs over the MoE router and preprocessing (the recipe's
``cuda_graph_scope``), and the MTP layer dropped where the run did not train it.

The fit (``--fit`` prints the constants to paste into
``profiler/cost_model/calibration.py``) minimises the sum of |ln(pred / meas)| over the
rows (L1: the median target, and robust to a row no constant explains) with Nelder-Mead
(scipy) in log space, inside ``BOUNDS``, from two starts (the lower loss wins);
``gemm_dim_half`` is not fitted here (measured on a GPU: ``GEMM_DIM_HALF``).

    python benchmarks/published.py [--json] [--fit]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, replace
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
from scipy.optimize import minimize  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from planner.core.cluster import ClusterSpec, cluster_from_dict  # noqa: E402
from planner.core.hf_config import load_model  # noqa: E402
from planner.core.model import ModelSpec  # noqa: E402
from planner.planning.estimate import estimate_step  # noqa: E402
from profiler.cost_model.calibration import BOUNDS, FITTED, GEMM_DIM_HALF, Calibration  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "published_runs.json"


def _dispatcher(row: dict) -> str:
    text = json.dumps(row.get("recipe", {})).lower() + str(row.get("dispatcher", "")).lower()
    return "hybridep" if "hybridep" in text else "deepep" if "deepep" in text else "alltoall"


def _recompute(row: dict) -> str:
    r = row.get("recipe", {})
    text = str(r.get("recompute", r.get("activation_checkpoint", r.get("activation_checkpointing",
                                                                            row.get("recompute", "none"))))).lower()
    return "full" if text == "true" else "selective" if "selective" in text else "none"


def _overlap(row: dict) -> bool | None:
    for key, value in {**row.get("recipe", {}), **row}.items():
        if "a2a_overlap" in key:
            return "true" in str(value).lower()
    return None


def _gpu(row: dict) -> str:
    """The GPU preset of a row: torchtitan's Grand Teton H100s (96 GB HBM2e, 500 W) have their own."""
    system = row.get("system", "").replace(" ", "").lower()
    return "h100-hbm2e-500w" if "hbm2e" in system and "500w" in system else row["gpu"]


def _kernels(row: dict) -> str:
    """torchtitan rows without torch.compile run PyTorch eager (the row id says eager)."""
    return "eager" if "eager" in row["id"] else "fused"


def _graphs(row: dict) -> bool:
    """Whether the recipe captures the MoE router and preprocessing in CUDA graphs."""
    scope = str(row.get("recipe", {}).get("cuda_graph_scope", ""))
    return "moe_router" in scope and "moe_preprocess" in scope


def row_cluster(row: dict) -> tuple[ClusterSpec, int]:
    """(cluster, pipeline flushes per step) of a published row."""
    pp, tp, cp = row["pp"], row["tp"], row.get("cp") or 1
    ga = row.get("ga") or 1
    flushes = ga if row["id"].startswith("automodel") else 1  # separate pipeline schedules (row note)
    data = {"gpu": _gpu(row), "num_gpus": row["num_gpus"], "gpus_per_node": 8,
            "parallel": {"pp": pp, "vpp": row.get("vp") or 1, "tp": tp, "cp": cp, "ep": row["ep"],
                         "etp": row.get("etp") or 1, "dp": row["num_gpus"] // (pp * tp * cp)},
            "training": {"global_batch": row["gbs"], "seq_len": row["seq_len"],
                         "micro_batch_size": row["mbs"], "recompute": _recompute(row),
                         "precision": "fp8" if "FP8" in row["precision"] else "bf16",
                         "fsdp": bool(row.get("fsdp")), "memory_headroom": 0.0,
                         "kernels": _kernels(row), "cuda_graphs": _graphs(row)},
            "network": {"dispatcher": _dispatcher(row)}}
    return cluster_from_dict(data, where=f"row {row['id']}"), flushes


def row_model(row: dict) -> ModelSpec:
    """The row's model; without its MTP layers where the run did not train them (row recipe)."""
    model = load_model(row["model"])
    if "not trained" not in str(row.get("recipe", {}).get("mtp", "")):
        return model
    kept = [layer for layer in model.layers if layer.role != "mtp"]
    return replace(model, layers=tuple(replace(layer, index=i) for i, layer in enumerate(kept)))


def predict(row: dict, cal: Calibration):
    cluster, flushes = row_cluster(row)
    return estimate_step(row_model(row), cluster, overlap=_overlap(row), flushes=flushes,
                         calibration=cal)


def _errors(rows: list[dict], cal: Calibration) -> list[float]:
    return [math.log(predict(r, cal).tokens_per_s_per_gpu / r["measured_tokens_per_s_per_gpu"]) for r in rows]


PRIOR = Calibration(gemm_eff_max=0.75, gemm_dim_half=GEMM_DIM_HALF, grouped_gemm_eff=0.7,
                    moe_layer_overhead_s=2e-4)
"""Second start of the fit: cuBLAS-like large-GEMM efficiency, a grouped-GEMM penalty, a small overhead."""


def fit(rows: list[dict], start: Calibration = FITTED) -> Calibration:
    """Constants minimising the summed |ln error| on ``rows`` (Nelder-Mead from ``start`` and
    from ``PRIOR``; the lower loss wins: the loss has more than one local minimum)."""
    start = replace(start, gemm_dim_half=GEMM_DIM_HALF)
    best = min((_fit_from(rows, s) for s in (start, PRIOR)), key=lambda r: r[0])
    return best[1]


def _fit_from(rows: list[dict], start: Calibration) -> tuple[float, Calibration]:
    names = list(BOUNDS)  # the fitted constants; the others (gemm_dim_half) stay as in start
    lo = np.log([max(BOUNDS[n][0], 1e-7) for n in names])
    hi = np.log([BOUNDS[n][1] for n in names])

    def cal_of(x: np.ndarray) -> Calibration:
        return replace(start, **{n: float(v) for n, v in zip(names, np.exp(np.clip(x, lo, hi)))})

    def loss(x: np.ndarray) -> float:  # L1: robust to the one row no constant explains
        return float(sum(abs(e) for e in _errors(rows, cal_of(x))))

    x0 = np.log([max(getattr(start, n), 1e-6) for n in names])
    simplex = np.vstack([x0] + [x0 + 0.5 * np.eye(len(x0))[i] for i in range(len(x0))])
    res = minimize(loss, x0, method="Nelder-Mead",
                   options={"maxiter": 400, "xatol": 1e-3, "fatol": 1e-5, "initial_simplex": simplex})
    return float(res.fun), cal_of(res.x)


def _summary(pred: list[float], meas: list[float]) -> dict:
    ln = [abs(math.log(p / m)) for p, m in zip(pred, meas)]
    return {"median_abs_ln": float(np.median(ln)), "max_abs_ln": max(ln),
            "spearman": float(spearmanr(pred, meas).statistic)}


def rank_orders(out: list[dict]) -> list[dict]:
    """Per model with two or more published configurations: the configurations ordered by
    measured tokens/s/GPU, and whether the estimate (the degree search's ranking function,
    ``estimate_step``) orders them the same, with the shipped and the leave-one-out constants."""
    orders = []
    for model in sorted({r["model"] for r in out}):
        rows = [r for r in out if r["model"] == model]
        if len(rows) < 2:
            continue
        measured = [r["id"] for r in sorted(rows, key=lambda r: -r["measured"])]
        pred = [r["id"] for r in sorted(rows, key=lambda r: -r["predicted"])]
        loo = [r["id"] for r in sorted(rows, key=lambda r: -r["loo_predicted"])]
        orders.append({"model": model, "measured_order": measured, "predicted_order": pred,
                       "same_order": pred == measured, "loo_same_order": loo == measured})
    return orders


def run(do_fit: bool) -> dict:
    data = json.loads(DATA.read_text())
    rows = data["rows"]
    cal = fit(rows) if do_fit else FITTED
    out = []
    for i, row in enumerate(rows):
        est = predict(row, cal)
        loo_cal = fit(rows[:i] + rows[i + 1:], start=cal)
        out.append({"id": row["id"], "model": row["model"], "num_gpus": row["num_gpus"],
                    "measured": row["measured_tokens_per_s_per_gpu"],
                    "predicted": round(est.tokens_per_s_per_gpu, 1),
                    "loo_predicted": round(predict(row, loo_cal).tokens_per_s_per_gpu, 1),
                    "predicted_mfu": round(est.mfu, 3), "recompute": est.recompute, "overlap": est.overlap,
                    "source": row["source"]})
    meas = [r["measured"] for r in out]
    memory = []
    for row in data.get("memory_rows", []):
        est = predict(row, cal)
        memory.append({"id": row["id"], "measured_gib": row["measured_peak_allocated_gib"],
                       "predicted_gib": round(est.peak_memory_bytes / 2**30, 1),
                       "rel_error": round(est.peak_memory_bytes / 2**30 / row["measured_peak_allocated_gib"] - 1, 3),
                       "source": row["source"]})
    return {"benchmark": "published", "calibration": asdict(cal), "rows": out,
            "in_sample": _summary([r["predicted"] for r in out], meas),
            "leave_one_out": _summary([r["loo_predicted"] for r in out], meas), "memory": memory,
            "rank_orders": rank_orders(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--fit", action="store_true", help="refit the constants on all rows (else the shipped ones)")
    args = ap.parse_args()
    res = run(args.fit)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print("calibration:", res["calibration"])
    print(f"{'row':36} {'meas':>7} {'pred':>8} {'loo':>8}")
    for r in res["rows"]:
        print(f"{r['id']:36} {r['measured']:7.0f} {r['predicted']:8.0f} {r['loo_predicted']:8.0f}")
    for k in ("in_sample", "leave_one_out"):
        s = res[k]
        print(f"{k}: median |ln| {s['median_abs_ln']:.3f}, max {s['max_abs_ln']:.3f}, Spearman {s['spearman']:.2f}")
    for o in res["rank_orders"]:
        print(f"order {o['model']}: measured {' > '.join(o['measured_order'])}; estimate same: "
              f"{o['same_order']}, leave-one-out same: {o['loo_same_order']}")
    for m in res["memory"]:
        print(f"memory {m['id']}: measured {m['measured_gib']} GiB, predicted {m['predicted_gib']} GiB")


if __name__ == "__main__":
    main()
