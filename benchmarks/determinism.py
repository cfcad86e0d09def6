"""Same question, same answer: the plan's hash idle and beside busy processes.

Each case (``cases``: every shipped model's default plan, the degree search for two models,
four cost tables) is planned as a user plans it (``ppplan plan ... --out FILE --quiet`` in a
subprocess, default ``--work``) twice: as the machine is, and with ``--busy`` CPU-bound
processes beside it. The hash covers the whole plan JSON but its ``wall_s`` fields; the
search spends a work budget, not wall time ([Note: work budget] in
``solvers.schedule.search.budget``), so the hashes must match. docs/search.md gives the figures.

    python benchmarks/determinism.py --json [--busy 2] [--only llama3-8b,table-pp8]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from planner.core.paths import SHIPPED_MODELS
from planner.core.plan import without_wall_s

ROOT = Path(__file__).resolve().parents[1]

FOUR = "examples/costs/four_stages.json"
"""Relative to the repository (where ``plan_hash`` runs): the plan records its profile's path,
so a path inside the checkout would make the hash depend on where the checkout is."""


def _table(layers: int, seed: int) -> dict:
    """A W-heavy MoE cost table with +-30% spread between layers (deterministic in ``seed``)."""
    rng = random.Random(seed)
    rows = []
    for k in range(layers):
        s = rng.uniform(0.7, 1.3)
        row = {"type": f"moe{k % 3}", "f": 0.010 * s, "i": 0.011 * s, "w": 0.018 * s, "a2a_f": 0.003 * s,
               "a2a_b": 0.003 * s, "act_bytes": int(2e9 * s), "act_w_bytes": int(8e8 * s), "param_bytes": int(4e9),
               "grad_bytes": int(4e9), "optim_bytes": int(8e9), "out_bytes": 1 << 26}
        if k == 0:
            row["role"] = "embedding"
        if k == layers - 1:
            row["role"] = "head"
        rows.append(row)
    return {"schema_version": 1, "kind": "ppplan.costs", "model": f"generated-{layers}-{seed}", "source": "user",
            "microbatch_size": 1, "seq_len": 4096, "p2p": {"latency_s": 2e-5, "bandwidth": 5e10}, "layers": rows,
            "pairs": [{"f_type": f"moe{a}", "b_type": f"moe{b}", "ov": 0.8 * (0.013 + 0.014)}
                      for a in range(3) for b in range(3)]}


GENERATED = Path(tempfile.gettempdir()) / "ppplan-determinism" / "generated16.json"
"""Where the generated table is written: one fixed path, because the plan records its
profile's path (``cluster.source``), so hashes from two runs of the benchmark compare."""


def cases() -> dict[str, list[str]]:
    """Case name -> ``ppplan plan`` arguments (before ``--out``). The ``--gpus`` cases cover the
    degree search, whose screen and full plans share the work budget ([Note: screen work] in
    ``planner.planning.degrees``); the generated tables are W-heavy with +-30% layer spread."""
    gen = GENERATED
    gen.parent.mkdir(parents=True, exist_ok=True)
    gen.write_text(json.dumps(_table(16, 7)))
    out = {m: [m] for m in SHIPPED_MODELS}
    out["qwen3-30b-a3b-gpus16"] = ["qwen3-30b-a3b", "--gpus", "16"]
    out["deepseek-v3-gpus1024"] = ["deepseek-v3", "--gpus", "1024"]
    out["table-four-4mb"] = ["--profile", FOUR, "--pp", "4", "--microbatches", "12", "--memory-limit", "4mb"]
    out["table-four-cpsat"] = ["--profile", FOUR, "--pp", "4", "--microbatches", "32", "--schedule", "cpsat"]
    out["table-pp8"] = ["--profile", str(gen), "--pp", "8", "--microbatches", "32", "--memory-limit", "12mb"]
    out["table-pp4-vpp2-steady"] = ["--profile", str(gen), "--pp", "4", "--vpp", "2", "--microbatches", "16",
                                     "--objective", "steady"]
    return out


def plan_hash(args: list[str], out: Path) -> tuple[str, float, dict]:
    """(hash, wall seconds, budget record) of ``ppplan plan ARGS --out OUT``."""
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "planner.cli", "plan", *args, "--out", str(out), "--quiet"],
                         capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        return f"exit {run.returncode}: {run.stderr.strip()[:200]}", wall, {}
    data = json.loads(out.read_text())
    text = json.dumps(without_wall_s(data), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16], wall, without_wall_s(data["solver"].get("budget", {}))


class Busy:
    """``n`` CPU-bound processes for the duration of a ``with`` block."""

    def __init__(self, n: int) -> None:
        self.n, self.procs = n, []

    def __enter__(self) -> "Busy":
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.n)]
        time.sleep(1.0)
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the second run")
    ap.add_argument("--only", help="comma-separated case names")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        todo = cases()
        if args.only:
            todo = {k: v for k, v in todo.items() if k in args.only.split(",")}
        for name, argv in todo.items():
            row = {"case": name, "args": " ".join(a.replace(str(ROOT) + "/", "") for a in argv)}
            row["idle_load"] = os.getloadavg()[0]
            row["idle_hash"], row["idle_wall_s"], row["budget"] = plan_hash(argv, tmp / "idle.json")
            with Busy(args.busy):
                row["busy_hash"], row["busy_wall_s"], _ = plan_hash(argv, tmp / "busy.json")
                row["busy_load"] = os.getloadavg()[0]
            row["identical"] = row["idle_hash"] == row["busy_hash"]
            rows.append(row)
            if not args.json:
                print(f"{name:<24} {row['idle_hash']:<18} {row['busy_hash']:<18} "
                      f"{'same' if row['identical'] else 'DIFFERENT'}  idle {row['idle_wall_s']:.1f} s "
                      f"(load {row['idle_load']:.1f})  busy {row['busy_wall_s']:.1f} s (load {row['busy_load']:.1f})")
    summary = {"benchmark": "determinism", "busy_processes": args.busy, "cases": len(rows),
               "identical": sum(r["identical"] for r in rows), "rows": rows}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"{summary['identical']}/{summary['cases']} identical with {args.busy} busy processes beside")


if __name__ == "__main__":
    main()
