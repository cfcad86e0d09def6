"""Kept budget: ``ppplan plan --time-limit S`` wall time against its cap, and plan quality.

Each case (every shipped model, pp 4-32, vpp 1-4, loop and V placement, up to 1024
microbatches, ``--recompute auto``) runs ``ppplan plan`` as a child process, the whole wall
a user waits, with ``--time-limit S`` and again with a longer reference limit. The targets
are ``wall_cap`` and ``QUALITY_TOL``; the figures are on docs/budget.md and docs/search.md.

    python benchmarks/budget.py --json [--ref-factor F] [--ref-cap S]   # every case
    python benchmarks/budget.py --quick --json      # 4 cases, no reference runs
    python benchmarks/budget.py --only deepseek     # cases whose id contains the text
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES: list[tuple[str, list[str], float]] = [
    # (model, options, time limit s)
    ("llama3-8b", ["--pp", "4"], 0.5),
    ("llama3-8b", ["--pp", "4"], 2.0),
    ("llama3-8b", ["--pp", "8", "--microbatches", "64"], 2.0),
    ("llama3-8b", ["--pp", "4", "--vpp", "2"], 2.0),
    ("llama3-8b", ["--pp", "4", "--vpp", "2", "--placement", "v"], 2.0),
    ("llama3-8b", ["--pp", "4", "--vpp", "4"], 3.0),
    ("llama3-8b", ["--pp", "4", "--microbatches", "auto"], 3.0),
    ("qwen3-30b-a3b", ["--pp", "4"], 1.0),
    ("qwen3-30b-a3b", ["--pp", "8"], 3.0),
    ("qwen3-30b-a3b", ["--pp", "4", "--vpp", "2", "--placement", "v"], 3.0),
    ("qwen3-30b-a3b", ["--pp", "8", "--vpp", "2"], 3.0),
    ("qwen3-30b-a3b", ["--pp", "4", "--vpp", "4", "--microbatches", "128", "--global-batch", "1024"], 3.0),
    ("qwen3-next-80b-a3b", ["--pp", "8"], 1.0),
    ("qwen3-next-80b-a3b", ["--pp", "8"], 5.0),
    ("qwen3-next-80b-a3b", ["--pp", "4", "--vpp", "2"], 3.0),
    ("qwen3-next-80b-a3b", ["--pp", "8", "--vpp", "2", "--placement", "v"], 3.0),
    ("qwen3-next-80b-a3b", ["--pp", "16", "--microbatches", "256", "--global-batch", "1024"], 5.0),
    ("qwen3-next-80b-a3b", ["--pp", "4", "--microbatches", "auto"], 3.0),
    ("qwen3-235b-a22b", ["--pp", "8"], 3.0),
    ("qwen3-235b-a22b", ["--pp", "8", "--vpp", "2"], 5.0),
    ("qwen3-235b-a22b", ["--pp", "16"], 3.0),
    ("qwen3-235b-a22b", ["--pp", "16", "--vpp", "2", "--placement", "v"], 5.0),
    ("qwen3-235b-a22b", ["--pp", "4", "--vpp", "4"], 5.0),
    ("qwen3-235b-a22b", ["--pp", "8", "--microbatches", "512", "--global-batch", "4096"], 5.0),
    ("deepseek-v3", ["--pp", "16"], 3.0),
    ("deepseek-v3", ["--pp", "16"], 10.0),
    ("deepseek-v3", ["--vpp", "2", "--placement", "v"], 3.0),
    ("deepseek-v3", ["--pp", "8", "--vpp", "2", "--microbatches", "64", "--global-batch", "16384"], 5.0),
    ("deepseek-v3", ["--pp", "32", "--microbatches", "512", "--global-batch", "32768"], 10.0),
    ("deepseek-v3", ["--pp", "32", "--microbatches", "256", "--global-batch", "16384"], 5.0),
    ("deepseek-v3", ["--pp", "32", "--vpp", "2", "--microbatches", "1024", "--global-batch", "65536"], 10.0),
    ("deepseek-v3", ["--pp", "4", "--vpp", "4", "--microbatches", "64", "--global-batch", "32768"], 5.0),
]
QUICK = [0, 7, 24, 26]
"""Indices of ``CASES`` in ``--quick``."""
QUALITY_TOL = 0.005
"""Largest step-time excess over the reference, judged only where the reference's own budget
did not bind (``solver.budget.bound`` false: its reproducible search ran to the end)."""


def wall_cap(limit: float) -> float:
    """The wall a ``ppplan plan --time-limit limit`` child may take, start-up and writing the
    plan included: 1.2 x limit + 2 s (docs/search.md, "The wall cap at load")."""
    return 1.2 * limit + 2.0


def case_id(model: str, opts: list[str], limit: float) -> str:
    """A short label, e.g. ``deepseek-v3 --pp 32 --microbatches 512 @10s``."""
    return " ".join([model, *opts]) + f" @{limit:g}s"


def run_plan(model: str, opts: list[str], limit: float, *, timeout: float) -> dict:
    """``ppplan plan`` in a child process: wall seconds, max RSS and the plan's figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        cmd = [sys.executable, "-m", "planner.cli", "plan", model, *opts, "--recompute", "auto",
               "--time-limit", str(limit), "--quiet", "--out", str(out)]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, "PPPLAN_QUIET": "1"})
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return {"wall_s": time.perf_counter() - t0, "status": f"timeout after {timeout:g} s"}
        wall = time.perf_counter() - t0
        rss_kib = _child_rss_kib()
        if proc.returncode != 0 or not out.exists():
            return {"wall_s": wall, "status": f"exit {proc.returncode}: {err.decode()[-300:].strip()}"}
        plan = json.loads(out.read_text())
    budget = plan["solver"].get("budget", {})
    return {"wall_s": wall, "status": "ok", "max_rss_mib": rss_kib / 1024 if rss_kib else None,
            "step_time_s": plan["predicted"]["step_time_s"],
            "steady_step_time_s": plan["predicted"].get("steady_step_time_s"),
            "schedule": plan["solver"]["schedule"], "microbatches": plan["microbatches"]["count"],
            "recompute": plan.get("cluster", {}).get("training", {}).get("recompute"),
            "budget_bound": budget.get("bound"), "cut_phases": budget.get("cut_phases"),
            "phase_ends_s": {k: v["wall_s"] for k, v in budget.get("phase_ends", {}).items()}}


_seen_rss = 0


def _child_rss_kib() -> int | None:
    """Max RSS of the child just reaped (``RUSAGE_CHILDREN`` is a running max over children,
    so a child below an earlier one reads as None)."""
    global _seen_rss
    import resource

    now = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = now if now > _seen_rss else None
    _seen_rss = max(_seen_rss, now)
    return out


def run_case(model: str, opts: list[str], limit: float, *, reference: bool, ref_factor: float,
             ref_cap: float) -> dict:
    """One row: the bounded run, the reference run and the verdicts."""
    row = {"case": case_id(model, opts, limit), "time_limit_s": limit, "wall_limit_s": wall_cap(limit)}
    got = run_plan(model, opts, limit, timeout=10 * limit + 60)
    row.update(got)
    row["kept"] = got["status"] == "ok" and got["wall_s"] <= row["wall_limit_s"]
    if reference and got["status"] == "ok":
        ref_limit = min(ref_cap, ref_factor * limit)
        ref = run_plan(model, opts, ref_limit, timeout=10 * ref_limit + 120)
        row["reference"] = {"time_limit_s": ref_limit, **{k: ref.get(k) for k in
                            ("status", "wall_s", "step_time_s", "budget_bound", "schedule")}}
        if ref["status"] == "ok":
            row["excess_vs_reference"] = got["step_time_s"] / ref["step_time_s"] - 1
            row["quality_ok"] = None if ref["budget_bound"] else row["excess_vs_reference"] <= QUALITY_TOL
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print JSON (default: a table)")
    ap.add_argument("--quick", action="store_true", help="4 cases, no reference runs")
    ap.add_argument("--only", help="run the cases whose id contains this text")
    ap.add_argument("--ref-factor", type=float, default=4.0, help="reference limit = this x S (default 4)")
    ap.add_argument("--ref-cap", type=float, default=30.0, help="largest reference limit, s (default 30)")
    args = ap.parse_args(argv)
    cases = [CASES[k] for k in QUICK] if args.quick else CASES
    if args.only:
        cases = [c for c in cases if args.only in case_id(*c)]
    rows = []
    for model, opts, limit in cases:
        rows.append(run_case(model, opts, limit, reference=not args.quick, ref_factor=args.ref_factor,
                             ref_cap=args.ref_cap))
        if not args.json:
            r = rows[-1]
            print(f"{r['case']:<70} wall {r['wall_s']:6.2f} / {r['wall_limit_s']:5.1f} s  "
                  f"{'kept' if r['kept'] else 'MISSED'}  bound={r.get('budget_bound')}  "
                  f"vs ref {r.get('excess_vs_reference', float('nan')):+.2%}  {r['status'][:60]}", flush=True)
    judged = [r["quality_ok"] for r in rows if r.get("quality_ok") is not None]
    summary = {"cases": len(rows), "kept": sum(r["kept"] for r in rows),
               "all_kept": all(r["kept"] for r in rows),
               "max_wall_over_limit": max(r["wall_s"] / r["wall_limit_s"] for r in rows),
               "quality_judged": len(judged), "quality_ok": sum(judged),
               "max_excess_vs_reference": max((r["excess_vs_reference"] for r in rows
                                               if "excess_vs_reference" in r), default=None)}
    if args.json:
        json.dump({"rows": rows, "summary": summary}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
