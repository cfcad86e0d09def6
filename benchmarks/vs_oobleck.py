"""Side by side with Oobleck (SOSP'23) on its own simulator's setting: GPT-3 6.7B, 1024 samples
a step, 30 instances losing some on its failure-frequency and spot traces.

Oobleck's simulator (``tools/simulator/oobleck_simulator.py`` of SymbioticLab/Oobleck, branch
``sosp23-artifact``; figure 9 in ``eval_tput_vs_freq.py``, figure 10 in ``eval_gcp_ec2.py``) is
an event loop over a node trace whose step time is a table of samples/s per live instance count
(measured on Oobleck's testbed, ``gpt_3_6_7b_simulate_step_delta``), plus its re-rendezvous and
lost-step costs. Each trace runs four ways: with that table; with ppplan's re-plans
(``replan_gpus(old, gpus=n)``, what ``ppplan replan OLD --gpus n`` calls, n = 1..30, samples/s
from ppplan's simulator); with those scaled to Oobleck's 30-instance figure (same full-fleet
speed, only the loss curve differs); and with Oobleck's instantiation rule over pipelines ppplan
plans (``oobleck_rule``). "ppplan alone" is the time-weighted mean of ppplan's table over the
trace (no pauses). ppplan's figures are for A100s (no V100 or A40 preset), simulated, not measured.

    git --git-dir=MIRROR archive sosp23-artifact | tar -x -C /tmp/oobleck-art
    python benchmarks/vs_oobleck.py --oobleck-dir /tmp/oobleck-art [--json] [--work 1]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import io
import json
import logging
import time
from pathlib import Path

from oobleck_rule import instantiate, template_costs
from planner.api import plan as make_plan
from planner.core.cluster import load_cluster
from planner.core.errors import InputError
from planner.replanning.elastic import replan_gpus

DATA = Path(__file__).resolve().parent / "data" / "oobleck"
MODEL = str(DATA / "gpt3-6.7b.json")
"""GPT-3 6.7B's shape (32 x 4096, 32 heads, 2048 tokens) as a Llama-style config; SwiGLU with
intermediate 10922 keeps GPT-3's MLP parameter count (two 4096 x 16384 matrices)."""
CLUSTER = str(DATA / "cluster-30.yaml")
OOBLECK_MODEL = "GPT-3-6_7b"
"""The simulator's model key (``Simulator.__init__``: 1024 samples a step, 10 s re-rendezvous)."""
BATCH = 1024
"""Samples a step (the simulator's ``samples_per_step`` for GPT-3 6.7B; the cluster file's batch)."""
COUNTS = range(1, 31)
"""Live instance counts (the simulator's table: 16..30, and 0 at 15 or fewer)."""
TRACES = {"6h": 200000, "3h": 200000, "1h": 200000, "30m": 200000, "10m": 200000,
          "scaled/scale_p3-trace": 2000000000, "scaled/scale_gcp-trace": 2000000000}
"""``tools/simulator/traces/<T>.csv`` -> the run's ``steps_per_run``: one instance removed every
T from 30 (figure 9, ``eval_tput_vs_freq.py``), and the spot traces of EC2 P3 (15-30 live) and
GCP (1-30 live) scaled to 30 (figure 10, ``eval_gcp_ec2.py``)."""
SIM = "tools/simulator/oobleck_simulator.py"


def load_simulator(root: Path):
    """Oobleck's simulator module from its tree (standard library only)."""
    spec = importlib.util.spec_from_file_location("oobleck_simulator", root / SIM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    logging.getLogger(module.__name__).setLevel(logging.WARNING)
    return module


def _live(sim) -> int:
    return sum(1 for i in sim.spot_instances.values() if i.is_running() or i.is_ready())


def oobleck_table(sim_module) -> dict[int, float]:
    """Samples/s per live count, read through the simulator's own step-time method."""
    table = {}
    for n in COUNTS:
        sim = sim_module.Simulator(model=OOBLECK_MODEL, seed=0)
        for k in range(n):
            sim.spot_instances[f"node{k}"] = inst = sim_module.SpotInstance(f"node{k}", 0)
            inst.set_ready()
        sim.simulate_step_delta()
        table[n] = sim.samples_per_step / (sim.step_delta / 1000) if sim.step_delta < 1e11 else 0.0
    return table


def simulate(sim_module, root: Path, trace: str, table: dict[int, float] | None) -> float:
    """Average samples/s of one trace, as ``eval_tput_vs_freq.py`` runs it; ``table`` replaces
    the simulator's step-time table (above 30 as 30, as its own)."""
    with open(root / "tools" / "simulator" / "traces" / f"{trace}.csv") as f, \
            contextlib.redirect_stdout(io.StringIO()):
        sim = sim_module.Simulator(seed=None, start_hour=0, generate_addition_probabilities=None,
                                   removal_probability=None, generate_graphs=False, spot_instance_trace=f,
                                   model=OOBLECK_MODEL, steps_per_run=TRACES[trace], time_hard_stop=True)
        if table is not None:
            def step(sim=sim):
                sim.step_delta = sim_module.tput2iter_time_ms(table.get(min(_live(sim), 30), 0.0),
                                                              sim.samples_per_step)
            sim.simulate_step_delta = step
        return sim.simulate().average_performance


def trace_mean(root: Path, trace: str, table: dict[int, float]) -> float:
    """Time-weighted mean of ``table`` over the trace's live counts (no pauses): ppplan alone."""
    with open(root / "tools" / "simulator" / "traces" / f"{trace}.csv", newline="") as f:
        rows = [(int(t), e) for t, e, _ in csv.reader(f)]
    live, last, total = 0, 0, 0.0
    for t, event in rows:
        total += (t - last) * table.get(min(live, 30), 0.0)
        live, last = live + (1 if event == "add" else -1), t
    return total / last


def ppplan_rows(work: float) -> list[dict]:
    """ppplan's re-plan for every count (the old plan: ``ppplan plan CONFIG --gpus 30``)."""
    old = make_plan(MODEL, cluster=CLUSTER, gpus=30, work=work)
    rows = []
    for n in COUNTS:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            s = replan_gpus(old, gpus=n, work=work, model=MODEL).plan.extra["replan"]
        except InputError as e:  # no shape fits memory on n GPUs: the job stops, as at 0 in Oobleck's table
            rows.append({"instances": n, "refused": str(e), "samples_per_s": 0.0})
            continue
        rows.append({"instances": n, "gpus_used": s["gpus_used"], "degrees": s["degrees_after"],
                     "step_s": s["step_after_s"], "samples_per_s": s["global_batch_after"] / s["step_after_s"],
                     "batch_kept": s["global_batch_after"] == s["global_batch_before"],
                     "wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(time.process_time() - c0, 2)})
    return rows


def run(root: Path, work: float) -> dict:
    sim_module = load_simulator(root)
    rows = ppplan_rows(work)
    ours = {r["instances"]: r["samples_per_s"] for r in rows}
    theirs = oobleck_table(sim_module)
    costs = template_costs(MODEL, load_cluster(CLUSTER), COUNTS, work=work)
    rule = {}
    for r in rows:
        best = instantiate(r["instances"], costs, BATCH)
        rule[r["instances"]] = BATCH / best[0] if best else 0.0
        r["oobleck_rule_samples_per_s"] = rule[r["instances"]]
        r["oobleck_rule_pipelines"] = {str(k): x for k, x in sorted(best[1].items())} if best else {}
        r["oobleck_samples_per_s"] = theirs[r["instances"]]
        r["kept"], r["oobleck_kept"] = ours[r["instances"]] / ours[30], theirs[r["instances"]] / theirs[30]
    planned = [r for r in rows if "refused" not in r]
    scaled = {n: v * theirs[30] / ours[30] for n, v in ours.items()}
    traces = []
    for t in TRACES:
        o, p, ps, ru = (simulate(sim_module, root, t, tab) for tab in (None, ours, scaled, rule))
        traces.append({"trace": t, "oobleck": o, "ppplan": p, "ppplan_scaled": ps,
                       "oobleck_rule": ru, "ppplan_over_oobleck_rule": p / ru,
                       "ppplan_alone": trace_mean(root, t, ours),
                       "oobleck_kept": o / theirs[30], "ppplan_kept": p / ours[30], "ppplan_scaled_kept": ps / theirs[30],
                       "scaled_over_oobleck": ps / o})
    return {"work": work, "counts": rows, "traces": traces,
            "summary": {"max_replan_wall_s": max(r["wall_s"] for r in planned),
                        "max_replan_cpu_s": max(r["cpu_s"] for r in planned),
                        "fewest_instances_planned": min(r["instances"] for r in planned),
                        "template_sizes": sorted(costs),
                        "all_batch_kept": all(r["batch_kept"] for r in planned)}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oobleck-dir", type=Path, required=True, help="SymbioticLab/Oobleck's sosp23-artifact tree")
    ap.add_argument("--work", type=float, default=1.0, help="--work of the old plan and of each re-plan")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    if not (args.oobleck_dir / SIM).is_file():
        ap.error(f"--oobleck-dir: no {SIM} under {args.oobleck_dir} (extract SymbioticLab/Oobleck's "
                 "sosp23-artifact branch there)")
    started = time.perf_counter()
    out = run(args.oobleck_dir, args.work)
    out["summary"]["wall_s"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print("instances  GPUs used  degrees (pp x dp)  ppplan samples/s (kept)  Oobleck samples/s (kept)  Oobleck rule")
    for r in out["counts"]:
        if "refused" in r:
            print(f"{r['instances']:>9}  refused: {r['refused']}")
            continue
        d = r["degrees"]
        print(f"{r['instances']:>9} {r['gpus_used']:>10}  {d['pp']:>4} x {d['dp']:<10} {r['samples_per_s']:>8.2f} "
              f"({r['kept']:.1%})       {r['oobleck_samples_per_s']:>8.2f} ({r['oobleck_kept']:.1%})"
              f"  {r['oobleck_rule_samples_per_s']:>8.2f}")
    print("                 trace  Oobleck  ppplan  ppplan scaled  ppplan alone  Oobleck rule  (samples/s)")
    for t in out["traces"]:
        print(f"{t['trace']:>22} {t['oobleck']:>8.2f} {t['ppplan']:>7.2f} {t['ppplan_scaled']:>14.2f} {t['ppplan_alone']:>13.2f} {t['oobleck_rule']:>13.2f}")
    print(json.dumps(out["summary"]))


if __name__ == "__main__":
    main()
