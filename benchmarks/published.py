"""Published training runs predicted through the user's path: ``ppplan plan MODEL --cluster FILE``.

Each row of ``benchmarks/published_rows.py`` (its page and table cited, the cluster file a
user would write for it under ``benchmarks/data/clusters/``) is planned through
``planner.api.plan``, the function the CLI calls, three ways: ``careful`` (the row's file),
``plain`` (GPUs, degrees, batch, sequence length) and ``recipe`` (plain plus the precision
and ``recipe: <framework>``, ``planner.core.recipes``); predicted against published
tokens/s/GPU, and held out by source family (constants refitted on the other families'
rows, ``benchmarks/published_fit.py``). docs/published-user-path.md and
docs/published-validation.md give the method and the figures.

    python benchmarks/published.py [--json] [--work W] [--rows ID,ID] [--ways careful,plain,recipe]
                                   [--no-held-out] [--fit] [--jobs N] [--change a2a-nvlink4|no-a2a]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import tempfile
from multiprocessing import get_context
from pathlib import Path

from planner.api import plan
from planner.core.errors import InfeasibleError
from planner.core.jsonio import read_yaml
from profiler.cost_model.fitted import FITTED, FittedConstants, using_constants
from solvers.schedule.search.budget import DEFAULT_WORK


def _sibling(name: str):
    module = sys.modules.get(f"ppplan_bench_{name}")
    if module is None:
        spec = importlib.util.spec_from_file_location(f"ppplan_bench_{name}", Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


rows_mod, fit_mod = _sibling("published_rows"), _sibling("published_fit")
DATA = rows_mod.FIRST
WAYS = ("careful", "plain", "recipe")
PLAIN_TRAINING = ("global_batch", "seq_len", "micro_batch_size")
"""The training fields a plain cluster file keeps."""
TARGET_RANGE = (0.67, 1.5)
"""The predicted / published ratios the validation targets (docs/published-validation.md): a row
outside them is a miss the README names."""
LINEARISATION_ROUNDS = 2
"""Rounds of the held-out fit's linearisation (the first at ``FITTED``, each next at the
constants fitted on every row the round before)."""
MIN_SPEARMAN_ROWS = 4
"""Models with at least this many rows get a within-model rank correlation."""


def row_model(row: dict) -> str:
    """The MODEL argument of the row's ``ppplan plan``: a shipped id, or the config of what the
    run trained (``model_config``; e.g. DeepSeek-V3 without the MTP layer AutoModel did not train)."""
    return str(DATA.parent / row["model_config"]) if "model_config" in row else row["model"]


def cluster_data(row: dict, way: str, change: str | None = None) -> dict:
    """The cluster mapping of ``row`` for ``way`` (see the module doc), under one of
    ``published_whatif.py``'s cluster-file changes when ``change`` names one (careful way)."""
    data = read_yaml(DATA.parent / row["cluster"], what="cluster file")
    if way == "careful":
        return _sibling("published_whatif").cluster_change(change, data) if change else data
    plain = {k: data[k] for k in ("gpu", "num_gpus", "gpus_per_node", "parallel") if k in data}
    plain["training"] = {k: v for k, v in data["training"].items() if k in PLAIN_TRAINING}
    if way == "recipe":  # the precision the user trains in, the rest from the framework's recipe
        plain["recipe"] = row["cluster_recipe"]
        if "precision" in data["training"]:
            plain["training"]["precision"] = data["training"]["precision"]
    return plain


def figures(result) -> dict:
    """What ``ppplan plan`` prints for a plan (same fields, same rounding), and tokens/s/GPU."""
    pred = result.predicted
    return {"step": f"{pred['step_time_s']:.4f}", "optimizer_step": f"{pred['optimizer_step_time_s']:.4f}",
            "mfu": f"{pred['mfu']:.1%}", "peak_gib": f"{max(pred['peak_memory_bytes']) / 2**30:.1f}",
            "rank_peaks_gib": [round(b / 2**30, 2) for b in pred["peak_memory_bytes"]],
            "tokens_per_s_per_gpu": pred["tokens_per_s_per_gpu"],
            "schedule": result.solver.get("schedule", ""),
            "recompute": result.cluster.get("training", {}).get("recompute", "")}


def plan_row(row: dict, way: str, *, work: float, folder: Path, calibration: FittedConstants | None = None,
             change: str | None = None) -> dict:
    """Plan ``row`` the ``way`` way from a cluster file, as ``ppplan plan`` does (with the
    cost model's ``calibration``: the shipped constants unless a held-out fold gives others;
    ``change``: see ``cluster_data``)."""
    path = folder / f"{row['id']}.{way}.yaml"
    path.write_text(json.dumps(cluster_data(row, way, change), indent=1))  # JSON is YAML
    try:
        with using_constants(calibration):
            result = plan(row_model(row), cluster=str(path), target=row["target"], work=work,
                          **row.get("ppplan_options", {}))
    except InfeasibleError as exc:  # e.g. no partition fits memory: recorded, not hidden
        return {"refused": str(exc).splitlines()[0]}
    got = figures(result)
    if "measured_tokens_per_s_per_gpu" in row:
        got["ratio"] = got["tokens_per_s_per_gpu"] / row["measured_tokens_per_s_per_gpu"]
    return got


def _plan_task(task: tuple) -> tuple[str, str, dict]:
    row, way, work, cal, change = task
    with tempfile.TemporaryDirectory() as tmp:
        return row["id"], way, plan_row(row, way, work=work, folder=Path(tmp), change=change,
                                        calibration=None if cal is None else FittedConstants.from_tuple(cal))


def plan_many(tasks: list[tuple[dict, str, FittedConstants | None]], *, work: float, jobs: int,
              change: str | None = None) -> list[dict]:
    """``plan_row`` for each (row, way, constants), in order, on ``jobs`` processes (the plans
    are deterministic: the same figures on any number)."""
    packed = [(row, way, work, None if cal is None else cal.as_tuple(), change) for row, way, cal in tasks]
    if jobs <= 1 or len(packed) <= 1:
        done = [_plan_task(t) for t in packed]
    else:
        with get_context("fork").Pool(jobs) as pool:
            done = pool.map(_plan_task, packed, chunksize=1)
    return [got for _, _, got in done]


def _ln(got: dict) -> float | None:
    return math.log(got["ratio"]) if "ratio" in got else None


def _slopes(planned: list[dict], base: FittedConstants, ln_base: dict[str, float], *, work: float, jobs: int,
            change: str | None) -> dict[str, dict[str, float]]:
    """Per row, d ln(pred) / d ln(c) at ``base`` for each fitted constant c: the row planned
    once more with c moved by ``published_fit.STEP``."""
    moves = [(name, r) for name in fit_mod.FIT_NAMES for r in planned]
    got = plan_many([(r, "careful", fit_mod.moved(base, name)) for name, r in moves], work=work, jobs=jobs,
                    change=change)
    slope: dict[str, dict[str, float]] = {r["id"]: {} for r in planned}
    for (name, row), g in zip(moves, got):
        ln1 = _ln(g)
        slope[row["id"]][name] = 0.0 if ln1 is None else (ln1 - ln_base[row["id"]]) / fit_mod.STEP
    return slope


def held_out(rows: list[dict], careful: dict[str, dict], *, work: float, jobs: int, change: str | None = None,
             rounds: int = LINEARISATION_ROUNDS) -> dict:
    """Leave-one-source-out: per family, constants fitted on the other families' rows, the
    family's rows planned again with them. The fit's surrogate is linearised at ``FITTED``
    (slopes from planning each row with each constant moved by ``published_fit.STEP``), then,
    for each further round, again at the constants the fit on every row gave (the rows
    planned there too), so a constant that moves far from its shipped value is fitted on
    slopes measured near where it lands."""
    planned = [r for r in rows if _ln(careful[r["id"]]) is not None]
    base, ln_base = FITTED, {r["id"]: _ln(careful[r["id"]]) for r in planned}
    for done in range(rounds):
        slope = _slopes(planned, base, ln_base, work=work, jobs=jobs, change=change)
        everything = fit_mod.fit_l1(base, ln_base, slope, list(ln_base))
        if done + 1 < rounds:
            got = plan_many([(r, "careful", everything) for r in planned], work=work, jobs=jobs, change=change)
            ln_next = {r["id"]: _ln(g) for r, g in zip(planned, got)}
            planned = [r for r in planned if ln_next[r["id"]] is not None]
            base, ln_base = everything, {r["id"]: ln_next[r["id"]] for r in planned}
    families = sorted({rows_mod.row_family(r) for r in rows})
    folds, tasks = {}, []
    for fam in families:
        train = [r["id"] for r in planned if rows_mod.row_family(r) != fam]
        cal = fit_mod.fit_l1(base, ln_base, slope, train)
        folds[fam] = {"constants": {n: getattr(cal, n) for n in fit_mod.FIT_NAMES}, "train_rows": len(train)}
        tasks += [(r, "careful", cal) for r in rows if rows_mod.row_family(r) == fam]
    got = plan_many(tasks, work=work, jobs=jobs, change=change)
    out = {row["id"]: g for (row, _, _), g in zip(tasks, got)}
    return {"rows": out, "folds": folds, "slopes": slope, "linearised_at": {n: getattr(base, n) for n in fit_mod.FIT_NAMES},
            "fit_all_rows": {n: getattr(everything, n) for n in fit_mod.FIT_NAMES}}


def _way_summary(results: list[dict]) -> dict:
    ln = [abs(math.log(r["ratio"])) for r in results if "ratio" in r]
    ratios = [r["ratio"] for r in results if "ratio" in r]
    return {"median_abs_ln": fit_mod.median(ln), "planned": len(ln), "refused": len(results) - len(ln),
            "ratio_min": min(ratios, default=None), "ratio_max": max(ratios, default=None),
            "outside": sum(1 for r in ratios if not TARGET_RANGE[0] <= r <= TARGET_RANGE[1])}


def _spearman(entries: list[dict], way: str) -> dict:
    by_model: dict[str, list[dict]] = {}
    for e in entries:
        by_model.setdefault(e["model"], []).append(e)
    out = {}
    for model, es in sorted(by_model.items()):
        if len(es) < MIN_SPEARMAN_ROWS:
            continue
        pts = [(e[way]["tokens_per_s_per_gpu"], e["measured"]) for e in es if "tokens_per_s_per_gpu" in e[way]]
        rho = fit_mod.spearman([p for p, _ in pts], [m for _, m in pts])
        out[model] = {"rows": len(es), "planned": len(pts), "spearman": rho}
    return out


def predicted_memory_gib(got: dict, row: dict) -> float | None:
    """The predicted figure of what the row published: the peak of the rank it was read on
    (``memory_rank``; default the largest over ranks, torchtitan's "max across all GPUs").
    Both published measures (``published_rows.MEASURES``) are compared with the predicted
    bytes the plan holds live; the caching allocator's unused reserve is not modelled."""
    if "rank_peaks_gib" not in got:
        return None
    rank = row.get("memory_rank")
    return got["rank_peaks_gib"][rank] if rank is not None else max(got["rank_peaks_gib"])


def _memory(rows: list[dict], careful: dict[str, dict]) -> list[dict]:
    """Predicted vs published peak for each row that publishes one (``careful``: row id -> the
    figures of its careful plan)."""
    out = []
    for row in rows:
        if "measured_peak_gib" not in row or row["id"] not in careful:
            continue
        got = careful[row["id"]]
        pred = predicted_memory_gib(got, row)
        out.append({"id": row["id"], "measure": row["memory_measure"], "rank": row.get("memory_rank", "max"),
                    "measured_gib": row["measured_peak_gib"],
                    "predicted_gib": pred, "ratio": None if pred is None else pred / row["measured_peak_gib"],
                    "refused": got.get("refused"), "source": row["source"]})
    return out


def run(*, work: float, ways: tuple[str, ...] = WAYS, only: set[str] | None = None,
        with_held_out: bool = True, jobs: int = 1, change: str | None = None) -> dict:
    rows = [r for r in rows_mod.load_rows() if only is None or r["id"] in only]
    memory_only = [r for r in rows_mod.load_memory_only_rows() if only is None or r["id"] in only]
    tasks = [(r, w, None) for r in rows for w in ways] + [(r, "careful", None) for r in memory_only]
    got = iter(plan_many(tasks, work=work, jobs=jobs, change=change))
    out, careful = [], {}
    for row in rows:
        entry = {"id": row["id"], "model": row["model"], "family": rows_mod.row_family(row),
                 "num_gpus": row["num_gpus"], "gpu": row["gpu"], "target": row["target"],
                 "measured": row["measured_tokens_per_s_per_gpu"], "source": row["source"]}
        for way in ways:
            entry[way] = next(got)
        out.append(entry)
        if "careful" in entry:
            careful[row["id"]] = entry["careful"]
    for row in memory_only:
        careful[row["id"]] = next(got)
    summary = {way: _way_summary([e[way] for e in out]) for way in ways}
    res = {"benchmark": "published-user-path", "work": work, "change": change, "rows": out, "summary": summary,
           "spearman": {way: _spearman(out, way) for way in ways},
           "memory": _memory(rows + memory_only, careful),
           "constants": {n: getattr(FITTED, n) for n in fit_mod.FIT_NAMES}}
    if with_held_out and "careful" in ways:
        ho = held_out(rows, careful, work=work, jobs=jobs, change=change)
        for e in out:
            e["held_out"] = ho["rows"][e["id"]]
        res["summary"]["held_out"] = _way_summary([e["held_out"] for e in out])
        res["spearman"]["held_out"] = _spearman(out, "held_out")
        res["families"] = {fam: {**fold, **_way_summary([e["held_out"] for e in out if e["family"] == fam])}
                           for fam, fold in ho["folds"].items()}
        res["fit_all_rows"] = ho["fit_all_rows"]
        res["linearised_at"] = ho["linearised_at"]
    return res


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
    ap.add_argument("--no-held-out", action="store_true", help="skip the leave-one-source-out validation")
    ap.add_argument("--fit", action="store_true", help="print the constants fitted on every row")
    ap.add_argument("--jobs", type=int, default=1, help="processes planning rows side by side (same figures)")
    changes = _sibling("published_whatif").CLUSTER_CHANGES
    ap.add_argument("--change", choices=changes, help="plan every row's careful file under this change of "
                    "benchmarks/published_whatif.py (the constants still fitted and held out as without it)")
    args = ap.parse_args()
    ways = tuple(w for w in args.ways.split(",") if w)
    if args.change and "careful" not in ways:
        ap.exit(2, "error: --change: applies to the careful way only (add careful to --ways)\n")
    res = run(work=args.work, ways=ways, only=set(args.rows.split(",")) if args.rows else None,
              with_held_out=not args.no_held_out or args.fit, jobs=args.jobs, change=args.change)
    if args.json:
        print(json.dumps(res, indent=1))
        return
    shown = ways + (("held_out",) if "held_out" in res["summary"] else ())
    print(f"{'row':44} {'meas':>7}  " + "  ".join(f"{w + ': tok/s ratio MFU GiB':>34}" for w in shown))
    for r in res["rows"]:
        print(f"{r['id']:44} {r['measured']:7.0f}  " + "  ".join(f"{_cell(r[w]):>34}" for w in shown))
    for w, s in res["summary"].items():
        med = "-" if s["median_abs_ln"] is None else f"{s['median_abs_ln']:.3f}"
        rng = "" if s["ratio_min"] is None else f", ratio {s['ratio_min']:.2f}-{s['ratio_max']:.2f}"
        print(f"{w}: median |ln(pred/meas)| {med} over {s['planned']} rows ({s['refused']} refused){rng}")
    for fam, f in res.get("families", {}).items():
        med = "-" if f["median_abs_ln"] is None else f"{f['median_abs_ln']:.3f}"
        print(f"held out {fam}: {f['planned']} rows, median |ln| {med}, constants "
              + ", ".join(f"{k} {v:.4g}" for k, v in f["constants"].items()))
    for w, models in res["spearman"].items():
        for model, sp in models.items():
            rho = "-" if sp["spearman"] is None else f"{sp['spearman']:.2f}"
            print(f"spearman {w} {model}: {rho} over {sp['planned']} rows")
    for m in res["memory"]:
        pred = m["refused"] or f"{m['predicted_gib']} GiB ({m['ratio']:.2f}x)"
        print(f"memory {m['id']} ({m['measure']}): measured {m['measured_gib']} GiB, predicted {pred}")
    if args.fit:
        print("fitted on every row: " + ", ".join(f"{k}={v:.4g}" for k, v in res["fit_all_rows"].items()))


if __name__ == "__main__":
    main()
