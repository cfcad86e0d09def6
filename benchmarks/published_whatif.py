"""Published runs under one changed physical constant each: which constant moves which row.

Each published row (``benchmarks/published.py``, the careful way: the row's own cluster
file, the shipped fitted constants) is planned again with one input replaced by a measured
figure, through the same ``planner.api.plan`` and a cluster file a user could write:

- ``a2a-nvlink4``: the intranode expert all-to-all of an H100-class GPU (NVLink 4, 18 links,
  450 GB/s one way: ``h100``, ``h100-hbm2e-500w``, ``h200``) at DeepEP's 337 GB/s, measured
  on an H20, whose NVLink is the H100's (DeepEP issue #16,
  https://github.com/deepseek-ai/DeepEP/issues/16: intranode test 337.35 GB/s; the maintainers:
  "the achievable bandwidth may fall below 380 GB/s"), instead of the 153 GB/s of DeepEP's
  README, which was measured on an H800, whose NVLink peaks "at approximately 160GB/s"
  (same issue) and which the presets give every Hopper part (``planner/core/hardware.py``);
  written as ``gpu: {preset: h100, a2a_intranode_bandwidth: 337e9}``;
- ``gemm-measured``: ``gemm_eff_max`` at the scale of the BF16 shape curve fitted to the H200's
  measured GEMM rates (``benchmarks/results/gpu_check_h200.json``, ``gpu_check.shape_curves``),
  so every GEMM runs at the rate measured for its shape, where the shipped 0.549, fitted on
  published runs, also absorbs what the model charges nowhere else;
- ``both``: the two together;
- ``no-a2a``: a bound, not a constant: every expert all-to-all at 1 PB/s on both links (its
  latency kept), so what a row still misses by is not the all-to-all's.

The constants are not refitted under a change (``published.py --fit`` does that), so a row
that moves shows which term it is sensitive to, not what a refitted model would predict.

    python benchmarks/published_whatif.py [--json] [--rows ID,ID] [--changes a2a-nvlink4,...] [--jobs N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from dataclasses import replace
from functools import cache
from multiprocessing import get_context
from pathlib import Path

from profiler.cost_model.fitted import FITTED, FittedConstants
from solvers.schedule.search.budget import DEFAULT_WORK

HERE = Path(__file__).resolve().parent
NVLINK4_GPUS = ("h100", "h100-hbm2e-500w", "h200")
"""Presets with the H100 SXM's NVLink 4 (18 links, 450 GB/s one way)."""
A2A_NVLINK4 = 337e9
"""DeepEP's intranode dispatch on an H20 (NVLink 4 like the H100 SXM): 337.35 GB/s (DeepEP issue #16)."""
H200_RESULTS = HERE / "results" / "gpu_check_h200.json"
A2A_FREE = 1e15
"""The ``no-a2a`` bound's all-to-all bandwidth, both links (bytes/s)."""
CHANGES = ("shipped", "a2a-nvlink4", "gemm-measured", "both", "no-a2a")


def _sibling(name: str):
    module = sys.modules.get(f"ppplan_bench_{name}")
    if module is None:
        spec = importlib.util.spec_from_file_location(f"ppplan_bench_{name}", HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


@cache
def measured_gemm_scale() -> float:
    """The BF16 shape curve's scale fitted to the H200's measured GEMM rates."""
    gemms = json.loads(H200_RESULTS.read_text())["gemms"]
    return _sibling("gpu_check").shape_curves(gemms)["bf16"]["scale"]


CLUSTER_CHANGES = ("a2a-nvlink4", "no-a2a")
"""The changes made in the cluster file alone (``published.py --change`` takes these)."""


def cluster_change(change: str, data: dict) -> dict:
    """A copy of the cluster mapping ``data`` under ``change`` (unchanged for a constants-only one)."""
    data = json.loads(json.dumps(data))
    gpu = data["gpu"] if isinstance(data["gpu"], str) else data["gpu"].get("preset", "")
    if change in ("a2a-nvlink4", "both") and isinstance(data["gpu"], str) and gpu.lower() in NVLINK4_GPUS:
        data["gpu"] = {"preset": gpu, "a2a_intranode_bandwidth": A2A_NVLINK4}
    if change == "no-a2a":
        data["gpu"] = {**({"preset": data["gpu"]} if isinstance(data["gpu"], str) else data["gpu"]),
                       "a2a_intranode_bandwidth": A2A_FREE, "a2a_internode_bandwidth": A2A_FREE}
    return data


def constants_change(change: str) -> FittedConstants | None:
    """The fitted constants under ``change``: None (the shipped ones) unless it moves them."""
    return replace(FITTED, gemm_eff_max=measured_gemm_scale()) if change in ("gemm-measured", "both") else None


def plan_changed(task: tuple[dict, str, float]) -> dict:
    """``published.plan_row``'s figures for the row, the careful way, under the change."""
    row, change, work = task
    with tempfile.TemporaryDirectory() as tmp:
        return _sibling("published").plan_row(row, "careful", work=work, folder=Path(tmp),
                                              calibration=constants_change(change), change=change)


def summary(entries: list[dict], change: str) -> dict:
    """``published.py``'s summary of one way (median |ln|, refused, ratio range, rows outside
    its target range) for the plans under ``change``."""
    return _sibling("published")._way_summary([e[change] for e in entries])


def run(*, work: float, changes: tuple[str, ...], only: set[str] | None, jobs: int) -> dict:
    rows = [r for r in _sibling("published_rows").load_rows() if only is None or r["id"] in only]
    tasks = [(r, c, work) for r in rows for c in changes]
    if jobs <= 1:
        got = [plan_changed(t) for t in tasks]
    else:
        with get_context("fork").Pool(jobs) as pool:
            got = pool.map(plan_changed, tasks, chunksize=1)
    it = iter(got)
    entries = [{"id": r["id"], "gpu": r["gpu"], "measured": r["measured_tokens_per_s_per_gpu"],
                **{c: next(it) for c in changes}} for r in rows]
    return {"benchmark": "published-whatif", "work": work, "a2a_nvlink4": A2A_NVLINK4,
            "gemm_eff_max": {"shipped": FITTED.gemm_eff_max, "measured": measured_gemm_scale()},
            "rows": entries, "summary": {c: summary(entries, c) for c in changes}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--work", type=float, default=DEFAULT_WORK, help="ppplan plan --work per plan (deterministic)")
    ap.add_argument("--rows", help="comma-separated row ids (default: all)")
    ap.add_argument("--changes", default=",".join(CHANGES), help=f"comma-separated: {', '.join(CHANGES)}")
    ap.add_argument("--jobs", type=int, default=1, help="processes planning rows side by side (same figures)")
    args = ap.parse_args()
    changes = tuple(c for c in args.changes.split(",") if c)
    bad = [c for c in changes if c not in CHANGES]
    if bad:
        ap.exit(2, f"error: --changes: unknown change {bad[0]!r} (use {', '.join(CHANGES)})\n")
    res = run(work=args.work, changes=changes, only=set(args.rows.split(",")) if args.rows else None, jobs=args.jobs)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{'row':64} " + " ".join(f"{c:>14}" for c in changes))
    for e in res["rows"]:
        cells = ["refused" if "refused" in e[c] else f"{e[c]['ratio']:.2f}" for c in changes]
        print(f"{e['id']:64} " + " ".join(f"{x:>14}" for x in cells))
    lo, hi = _sibling("published").TARGET_RANGE
    for c, s in res["summary"].items():
        med = "-" if s["median_abs_ln"] is None else f"{s['median_abs_ln']:.3f}"
        print(f"{c}: median |ln(pred/meas)| {med} over {s['planned']} rows ({s['refused']} refused), "
              f"{s['outside']} outside {lo}-{hi}")


if __name__ == "__main__":
    main()
