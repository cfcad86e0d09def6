"""Ctrl-C latency: time from SIGINT to the exit of ``ppplan`` in each long phase.

Each case starts a ``ppplan`` child, waits a fixed delay until it is inside the phase named
(the heuristic search, a CP-SAT polish, DeepSeek-V3's search, a measured profile), sends
SIGINT and times the exit. Expected: exit 130, the one line ``interrupted; no output
written``, no output file, under about a second (the watchdog of ``planner/cli/interrupt.py``
exits 0.5 s after the signal when the main thread is in native code). docs/errors.md gives
the figures.

    python benchmarks/interrupt.py --json           # every case, 3 repeats
    python benchmarks/interrupt.py --repeats 1
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES: list[tuple[str, list[str], float]] = [
    # (id, ppplan arguments before --out, seconds to wait before SIGINT)
    ("plan qwen3-next (heuristic search)", ["plan", "--quiet"], 3.0),
    ("plan qwen3-30b-a3b --schedule cpsat (CP-SAT solve)",
     ["plan", "qwen3-30b-a3b", "--schedule", "cpsat", "--work", "30", "--quiet"], 10.0),
    ("plan deepseek-v3 (search)", ["plan", "deepseek-v3", "--quiet"], 5.0),
    ("profile qwen3-next (measuring, torch)", ["profile", "qwen3-next-80b-a3b", "--scale", "0.02",
                                               "--no-links", "--quiet"], 6.0),
]
"""The delays are generous: a loaded machine delays the child's start. The CP-SAT case plans
qwen3-30b-a3b because llama3-8b's solve now ends within the delay."""


def run_case(args: list[str], delay: float) -> dict:
    """One SIGINT: latency, exit code, stderr and whether anything was written."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        proc = subprocess.Popen([sys.executable, "-m", "planner.cli", *args, "--out", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp)
        time.sleep(delay)
        if proc.poll() is not None:
            return {"finished_before_sigint": True, "exit_code": proc.returncode}
        sent = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        latency = time.perf_counter() - sent
        err = proc.stderr.read() if proc.stderr else ""
        return {"latency_s": round(latency, 3), "exit_code": proc.returncode, "stderr": err.strip(),
                "files_left": sorted(p.name for p in Path(tmp).iterdir())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="Print the rows as JSON.")
    opts = ap.parse_args()
    rows = []
    for name, args, delay in CASES:
        runs = [run_case(args, delay) for _ in range(opts.repeats)]
        lat = [r["latency_s"] for r in runs if "latency_s" in r]
        ok = all(r.get("exit_code") == 130 and r.get("stderr") == "interrupted; no output written"
                 and not r.get("files_left") for r in runs)
        rows.append({"case": name, "delay_s": delay, "runs": len(runs),
                     "latency_median_s": statistics.median(lat) if lat else None,
                     "latency_max_s": max(lat) if lat else None, "contract_met": ok, "details": runs})
    if opts.json:
        print(json.dumps(rows, indent=1))
        return
    for r in rows:
        print(f"{r['case']:<50} median {r['latency_median_s']} s  max {r['latency_max_s']} s  "
              f"exit 130, one line, nothing written: {r['contract_met']}")


if __name__ == "__main__":
    main()
