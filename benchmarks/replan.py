"""Re-planning after routing drift on the shipped traces (examples/routing/).

Scenario: qwen3-next-80b-a3b on its default cluster, planned with balanced routing, re-planned
for ``start.json`` (the first row: the start plan); each later trace goes to
``replan(start_plan, trace)``, and the row (``_row``) gives the start plan's step under the
new routing, the recommended, best and front-door re-plans, gain, gap recovered, migration
and the decision. Targets: the balanced trace keeps the plan; a hot layer range recovers
most of the gap to the best plan. Unless ``--no-megatron``, each row is re-planned again
from the Megatron logs ``examples/routing/make_traces.py`` writes for the same routing
(``_megatron``: same counts, same decision). Step times are simulator predictions; only
``wall_s`` depends on the machine. docs/replan.md gives the figures.

    python benchmarks/replan.py [--json] [--min-gain 0.03] [--no-megatron]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
import time
from pathlib import Path

from planner.api import plan as make_default_plan
from planner.core.hf_config import load_model
from planner.replanning import DEFAULT_MIN_GAIN, replan
from planner.replanning.inputs import read_traces
from planner.replanning.megatron_layout import megatron_layout

ROUTING = Path(__file__).resolve().parent.parent / "examples" / "routing"
CASES = (("balanced", "balanced.json", None), ("hot_early", "hot_early.jsonl", None),
         ("hot_late", "hot_late.jsonl", None), ("drift_last", "drift.jsonl", 1),
         ("drift_all", "drift.jsonl", None))
"""(name, trace file, window)."""
FOLDERS = {"start.json": "start", "balanced.json": "balanced", "hot_early.jsonl": "hot_early",
           "hot_late.jsonl": "hot_late", "drift.jsonl": "drift"}
"""Single-file trace -> make_traces.TRACES name of the Megatron log folder with the same counts."""


def _make_traces():
    spec = importlib.util.spec_from_file_location("make_traces", ROUTING / "make_traces.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _megatron(trace: str, window: int | None, old, min_gain: float, res, tmp: Path) -> dict:
    """Re-plan ``old`` from the Megatron logs of ``trace``'s routing; compare with ``res``."""
    mt = _make_traces()
    kind, iterations = mt.TRACES[FOLDERS[trace]]
    folder = tmp / f"{id(old)}-{kind}" / "tokens_per_expert"
    model = load_model(old.model["name"])
    mt.write_megatron_logs(folder, megatron_layout(old, model), mt.draws(kind, seed=0, iterations=iterations),
                           seed=0)
    t0 = time.perf_counter()
    logs = replan(old, [folder], window=window, min_gain=min_gain, routing_format="megatron")
    wall = time.perf_counter() - t0
    counts = read_traces(old, model, [folder], window=window).tokens_per_expert
    single = read_traces(old, model, [ROUTING / trace], window=window).tokens_per_expert
    same = {"decision": logs.recommended == res.recommended, "gain": logs.gain == res.gain,
            "old_step_s": logs.old_step_s == res.old_step_s, "new_step_s": logs.new_step_s == res.new_step_s,
            "new_stages": logs.plan.bounds() == res.plan.bounds()}
    return {"files": len(list(folder.iterdir())), "bytes": sum(p.stat().st_size for p in folder.iterdir()),
            "counts_equal": counts == single, "same": same, "agree": counts == single and all(same.values()),
            "wall_s": wall}


def _row(name: str, trace: str, window: int | None, old, min_gain: float,
         tmp: Path | None) -> tuple[dict, object]:
    t0 = time.perf_counter()
    res = replan(old, [ROUTING / trace], window=window, min_gain=min_gain)
    wall = time.perf_counter() - t0
    rp = res.plan.extra["replan"]
    hot = _ranges([d.layer for d in res.layers if d.now_imbalance > 1.2])
    return {
        "case": name, "trace": trace, "window": window,
        "hot_layers": hot,
        "then_step_s": res.then_step_s, "old_step_s": res.old_step_s,
        "old_fits_memory": not res.old_problem, "new_step_s": res.new_step_s,
        "best_step_s": res.best_step_s, "front_door_step_s": rp["front_door"]["step_time_s"],
        "gain": res.gain, "gap_recovered": res.gap_recovered,
        "moved_layers": len(res.migration.moves), "front_door_moved_layers": rp["front_door"]["moved_layers"],
        "migration_bytes": res.migration.total_bytes, "migration_s": res.migration.seconds,
        "break_even_steps": rp["break_even_steps"],
        "decision": "replan" if res.recommended else "keep", "reason": res.reason,
        "old_stages": rp["old_stages"], "new_stages": [list(b) for b in res.plan.bounds()],
        "wall_s": wall,
        "megatron": _megatron(trace, window, old, min_gain, res, tmp) if tmp is not None else None,
    }, res


def _ranges(layers: list[int]) -> str:
    """Layer indices with busiest-rank imbalance > 1.2 as compact ranges ("1-12,49")."""
    parts: list[list[int]] = []
    for k in layers:
        if parts and k == parts[-1][1] + 1:
            parts[-1][1] = k
        else:
            parts.append([k, k])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in parts)


def run(min_gain: float, megatron: bool = True) -> dict:
    """All rows (see the module doc)."""
    default = make_default_plan()
    with tempfile.TemporaryDirectory(prefix="replan-megatron-") as tmp_dir:
        tmp = Path(tmp_dir) if megatron else None
        first, start = _row("start", "start.json", None, default, min_gain, tmp)
        rows = [first] + [_row(n, t, w, start.plan, min_gain, tmp)[0] for n, t, w in CASES]
    by = {r["case"]: r for r in rows}
    hot = [by[c] for c in ("hot_early", "hot_late", "drift_last")]
    targets = {"balanced_keeps": by["balanced"]["decision"] == "keep",
               "hot_gap_recovered": {r["case"]: r["gap_recovered"] for r in hot}}
    if megatron:
        targets["megatron_logs_agree"] = all(r["megatron"]["agree"] for r in rows)
    return {"model": "qwen3-next-80b-a3b", "cluster": "planner/data/clusters/qwen3-next-80b-a3b.yaml",
            "min_gain": min_gain, "rows": rows, "targets": targets}


def _table(out: dict) -> str:
    head = (f"{'case':<11}{'hot':>9}{'old s':>8}{'fits':>6}{'new s':>8}{'best s':>8}{'gain':>7}"
            f"{'gap':>6}{'moved':>7}{'fd mv':>6}{'GB':>7}{'mig s':>7}{'b-e':>5}  decision  megatron logs")
    lines = [head]
    for r in out["rows"]:
        gap = f"{r['gap_recovered']:.0%}" if r["gap_recovered"] is not None else "-"
        lines.append(f"{r['case']:<11}{r['hot_layers']:>9}{r['old_step_s']:>8.3f}"
                     f"{'yes' if r['old_fits_memory'] else 'NO':>6}{r['new_step_s']:>8.3f}"
                     f"{r['best_step_s']:>8.3f}{r['gain']:>7.1%}{gap:>6}{r['moved_layers']:>7}"
                     f"{r['front_door_moved_layers']:>6}{r['migration_bytes'] / 1e9:>7.1f}"
                     f"{r['migration_s']:>7.2f}{str(r['break_even_steps']):>5}  {r['decision']:<8}  "
                     f"{_agreement(r['megatron'])}")
    return "\n".join(lines)


def _agreement(m: dict | None) -> str:
    if m is None:
        return "-"
    if m["agree"]:
        return f"same ({m['files']} files)"
    return "DIFFERS: " + ", ".join(k for k, v in {"counts": m["counts_equal"], **m["same"]}.items() if not v)


def main() -> None:
    """Print the table, or JSON with --json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--min-gain", type=float, default=DEFAULT_MIN_GAIN)
    parser.add_argument("--no-megatron", action="store_true", help="skip the Megatron-log re-plans")
    args = parser.parse_args()
    out = run(args.min_gain, megatron=not args.no_megatron)
    print(json.dumps(out, indent=1) if args.json else _table(out))


if __name__ == "__main__":
    main()
