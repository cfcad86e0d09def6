"""Published training runs predicted through the user's path: ``ppplan plan MODEL --cluster FILE``.

Rows: ``benchmarks/data/published_runs.json`` (Megatron-Bridge / NeMo performance
summaries, torchtitan, NeMo AutoModel; each row cites its source). Each row names the
cluster file a user would write for it (``benchmarks/data/clusters/<row>.yaml``: every
setting its source states), the ``--target`` it runs on and, where the run trained another
model than the shipped config (AutoModel's DeepSeek-V3 without its MTP layer), the config it
trained (``model_config``, under ``benchmarks/data/models/``). Each row is planned in three
ways, each exactly as ``ppplan plan MODEL --cluster FILE --target T`` plans it (through
``planner.api.plan``, the function the CLI calls):

- ``careful``: the row's cluster file;
- ``plain``: the same file cut to GPUs, degrees, batch and sequence length;
- ``recipe``: the plain file plus ``recipe: <framework>`` (``planner.core.recipes``): the
  framework recipe's dispatcher, CUDA graphs, FSDP, kernels and recomputation fill what
  the file leaves out.

Per row and way it prints what ``ppplan plan`` prints (schedule step, optimizer step, MFU,
largest per-rank peak) and tokens/s/GPU = global batch tokens / optimizer step / GPUs
against the published figure; per way the median |ln(pred / meas)| over the rows planned;
for each published peak (``memory_rows``) the predicted largest per-rank peak.

    python benchmarks/published.py [--json] [--work W] [--rows ID,ID] [--ways careful,plain,recipe]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from planner.api import plan  # noqa: E402
from planner.core.errors import InfeasibleError  # noqa: E402
from planner.core.jsonio import read_yaml  # noqa: E402
from solvers.schedule.budget import DEFAULT_WORK  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "published_runs.json"
WAYS = ("careful", "plain", "recipe")
PLAIN_TRAINING = ("global_batch", "seq_len", "micro_batch_size")
"""The training fields a plain cluster file keeps."""


def row_model(row: dict) -> str:
    """The MODEL argument of the row's ``ppplan plan``: a shipped id, or the config of what the
    run trained (``model_config``; e.g. DeepSeek-V3 without the MTP layer AutoModel did not train)."""
    return str(DATA.parent / row["model_config"]) if "model_config" in row else row["model"]


def cluster_data(row: dict, way: str) -> dict:
    """The cluster mapping of ``row`` for ``way`` (see the module doc)."""
    data = read_yaml(DATA.parent / row["cluster"], what="cluster file")
    if way == "careful":
        return data
    plain = {k: data[k] for k in ("gpu", "num_gpus", "gpus_per_node", "parallel") if k in data}
    plain["training"] = {k: v for k, v in data["training"].items() if k in PLAIN_TRAINING}
    if way == "recipe":
        plain["recipe"] = row["cluster_recipe"]
    return plain


def figures(result) -> dict:
    """What ``ppplan plan`` prints for a plan (same fields, same rounding), and tokens/s/GPU."""
    pred = result.predicted
    return {"step": f"{pred['step_time_s']:.4f}", "optimizer_step": f"{pred['optimizer_step_time_s']:.4f}",
            "mfu": f"{pred['mfu']:.1%}", "peak_gib": f"{max(pred['peak_memory_bytes']) / 2**30:.1f}",
            "tokens_per_s_per_gpu": pred["tokens_per_s_per_gpu"],
            "schedule": result.solver.get("schedule", ""),
            "recompute": result.cluster.get("training", {}).get("recompute", "")}


def plan_row(row: dict, way: str, *, work: float, folder: Path) -> dict:
    """Plan ``row`` the ``way`` way from a cluster file, as ``ppplan plan`` does."""
    path = folder / f"{row['id']}.{way}.yaml"
    path.write_text(json.dumps(cluster_data(row, way), indent=1))  # JSON is YAML
    try:
        result = plan(row_model(row), cluster=str(path), target=row["target"], work=work)
    except InfeasibleError as exc:  # e.g. no partition fits memory: recorded, not hidden
        return {"refused": str(exc).splitlines()[0]}
    return figures(result)


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def run(*, work: float, ways: tuple[str, ...] = WAYS, only: set[str] | None = None) -> dict:
    data = json.loads(DATA.read_text())
    pick = [r for r in data["rows"] if only is None or r["id"] in only]
    out, memory = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for row in pick:
            entry = {"id": row["id"], "model": row["model"], "num_gpus": row["num_gpus"], "target": row["target"],
                     "measured": row["measured_tokens_per_s_per_gpu"], "source": row["source"]}
            for way in ways:
                got = plan_row(row, way, work=work, folder=Path(tmp))
                if "tokens_per_s_per_gpu" in got:
                    got["ratio"] = got["tokens_per_s_per_gpu"] / entry["measured"]
                entry[way] = got
            out.append(entry)
        for row in data.get("memory_rows", []):
            if only is not None and row["id"] not in only:
                continue
            got = plan_row(row, "careful", work=work, folder=Path(tmp))
            memory.append({"id": row["id"], "measured_gib": row["measured_peak_allocated_gib"], **got,
                           "source": row["source"]})
    summary = {way: _way_summary([e[way] for e in out]) for way in ways}
    return {"benchmark": "published-user-path", "work": work, "rows": out, "summary": summary,
            "memory": memory}


def _way_summary(results: list[dict]) -> dict:
    ln = [abs(math.log(r["ratio"])) for r in results if "ratio" in r]
    ratios = [r["ratio"] for r in results if "ratio" in r]
    return {"median_abs_ln": _median(ln), "planned": len(ln), "refused": len(results) - len(ln),
            "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None)}


def _cell(got: dict) -> str:
    if "refused" in got:
        return "refused"
    return f"{got['tokens_per_s_per_gpu']:7.0f} {got['ratio']:5.2f}x {got['mfu']:>6} {got['peak_gib']:>5}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--work", type=float, default=DEFAULT_WORK, help="ppplan plan --work per plan (deterministic)")
    ap.add_argument("--rows", help="comma-separated row ids (default: all)")
    ap.add_argument("--ways", default=",".join(WAYS), help="comma-separated: careful, plain, recipe")
    args = ap.parse_args()
    ways = tuple(w for w in args.ways.split(",") if w)
    res = run(work=args.work, ways=ways, only=set(args.rows.split(",")) if args.rows else None)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{'row':36} {'meas':>7}  " + "  ".join(f"{w + ': tok/s ratio MFU GiB':>34}" for w in ways))
    for r in res["rows"]:
        print(f"{r['id']:36} {r['measured']:7.0f}  " + "  ".join(f"{_cell(r[w]):>34}" for w in ways))
    for w, s in res["summary"].items():
        med = "-" if s["median_abs_ln"] is None else f"{s['median_abs_ln']:.3f}"
        print(f"{w}: median |ln(pred/meas)| {med} over {s['planned']} rows ({s['refused']} refused)")
    for m in res["memory"]:
        print(f"memory {m['id']}: measured {m['measured_gib']} GiB, predicted {m.get('peak_gib', m.get('refused'))}")


if __name__ == "__main__":
    main()
