"""Costs from traces (``ppplan profile --from-trace``, docs/trace-import.md), two figures:

- ``hta``: Holistic Trace Analysis's own GPU test trace (``tests/data/trace/``): the
  communication / computation overlap the importer reads from it against what HTA's
  ``get_comm_comp_overlap`` reports for the same file (equal: the same rule, HTA's
  classifier);
- ``cpu``: the user's path on this CPU (gloo), every step a ``ppplan`` command: ``profile
  --device cpu`` (the reference), ``plan --pp 2`` from it, ``replay --torch-profile`` (the
  traces), ``profile --from-trace`` (the table under test), and ``plan --profile`` from that
  table (the loop closed). Per layer type, F, I, W, B and the exposed all-to-all from the
  trace against the profile's, with their ratio (target within 15%), and the trace's hidden
  share of each MoE all-to-all; and per rank the share of the replay's own measured busy time
  the trace's layer ranges account for.

    python benchmarks/trace_import.py [--json] [--only hta|cpu] [--model M] [--scale F] [--ep N] [--steps N]
                                      [--schedule S] [--micro-batch N]
                                      [--rounds K] [--repeats R] [--also-alone] [--also-one-group]

The profile measures on both of its processes at once (``profiler.measure_worker``,
[Note: concurrent ranks]), as the replay's two ranks compute at once; ``--also-alone`` runs
``ppplan profile --alone`` (one process times, the other idles) beside it in every round and
compares the trace with both (``rows_alone``). At ``--ep`` above 1 the profile runs one
expert-parallel group per pipeline stage (``--groups 2``: the replay's ``2 x ep`` processes at
once, ``profile_groups``); ``--also-one-group`` runs the one-group profile (``ep`` processes)
beside it and compares the trace with both (``rows_one_group``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HTA_TRACE = ROOT / "tests" / "data" / "trace" / "hta_sampled_rank-0.json.gz"
TARGET = 0.15
"""Largest relative difference per field the importer aims for on the CPU loop."""
PP = 2
"""Pipeline stages of the loop's plan and replay."""
_FIELDS = ("f", "i", "w", "b", "a2a_f", "a2a_b")


def hta_figures() -> dict:
    """The importer's and HTA's comm/compute overlap of HTA's test trace (rank 0)."""
    from hta.trace_analysis import TraceAnalysis

    from profiler.trace.attribute import rank_facts
    from profiler.trace.read import read_trace

    facts = rank_facts(read_trace(HTA_TRACE, 0))
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(HTA_TRACE, Path(tmp) / HTA_TRACE.name)
        hta = TraceAnalysis(trace_dir=tmp).get_comm_comp_overlap(visualize=False)
    ours, theirs = round(100 * facts.comm_comp_overlap, 2), float(hta.iloc[0]["comp_comm_overlap_pctg"])
    return {"trace": str(HTA_TRACE.relative_to(ROOT)), "clock": facts.clock,
            "comm_ms": round(1e3 * facts.comm_s, 3), "overlap_pct": ours, "hta_overlap_pct": theirs,
            "equal": ours == theirs}


def _ppplan(cwd: Path, *args: str, timeout: float = 900) -> float:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "planner.cli", *args], cwd=cwd, capture_output=True, text=True,
                         timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"ppplan {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()[-800:]}")
    return round(time.monotonic() - t0, 1)


def _per_type(table: dict) -> dict:
    """Per layer type of a cost table, the median of each compared field over its layers."""
    rows: dict[str, list[dict]] = {}
    for lc in table["layers"]:
        rows.setdefault(lc["type"].split("@", 1)[0], []).append(lc)
    return {t: {k: statistics.median(lc.get(k, lc["i"] + lc["w"]) for lc in ls) for k in _FIELDS}
            for t, ls in rows.items()}


def _busy_share(folder: Path, busy_s: list[float], steps: int, ep: int) -> dict:
    """Per rank, the layer ranges' time per step (compute + all-to-all) over the busy time the
    replay's own timers measured in the same run on its pipeline rank (global rank // ep, as
    ``planner.replay.lowering.make_layout`` numbers them): how much of the run the trace attributes.
    Both with the profiler's cost in them (``rank_facts(compensate=False)``): the replay's timers
    ran under the profiler too."""
    from profiler.trace.attribute import rank_facts
    from profiler.trace.read import read_traces

    out = {}
    for trace in read_traces(str(folder)):
        facts = rank_facts(trace, compensate=False)
        per_step = sum(s.compute_s + s.a2a_s for s in facts.work) / steps
        out[str(trace.rank)] = round(per_step / busy_s[trace.rank // ep], 3)
    return out


def profile_groups(ep: int) -> int:
    """The reference profile's ``--groups``: at ``ep > 1`` one expert-parallel group per pipeline
    stage, so that it runs the replay's ``PP x ep`` processes at once, as the replay's stages
    each run their own group; 1 at ``ep == 1``, whose two processes already measure at once as
    the replay's two ranks compute ([Note: concurrent ranks])."""
    return PP if ep > 1 else 1


def _extra_profiles(*, also_alone: bool, also_one_group: bool) -> dict[str, dict]:
    """The profiles each round runs beside the reference: name -> ``_profile`` overrides."""
    extra: dict[str, dict] = {}
    if also_alone:
        extra["alone"] = {"alone": True, "out": "PA"}
    if also_one_group:
        extra["one_group"] = {"groups": 1, "out": "PG"}
    return extra


def _profile(work: Path, r: int, *, model: str, scale: float, ep: int, shape: list[str], micro_batch: int,
             repeats: int, groups: int = 1, alone: bool = False, out: str = "P") -> float:
    """``ppplan profile --device cpu`` (the reference) to ``<out><r>.json``; its wall. ``--groups``
    is passed only above 1, so that a one-group profile runs the command it ran before."""
    return _ppplan(work, "profile", model, "--device", "cpu", "--scale", str(scale), "--ep", str(ep), "--threads", "1",
                   "--modules", "native", "--quiet", "--micro-batch", str(micro_batch), "--repeats", str(repeats),
                   *shape, *(["--groups", str(groups)] if groups > 1 else []), *(["--alone"] if alone else []),
                   "--out", f"{out}{r}.json")


def _loop_round(work: Path, r: int, *, ep: int, steps: int) -> tuple[dict, dict]:
    """The traced replay of the plan in ``work`` and ``profile --from-trace``, to files of round
    ``r``: the round's walls and replay facts, and the cost table read from its traces."""
    walls = {
        "replay": _ppplan(work, "replay", "plan.json", "--ep", str(ep), "--steps", str(steps), "--warmup", "1",
                          "--threads", "1", "--no-grad-check", "--torch-profile", f"traces{r}", "--out", f"r{r}.json"),
        "from_trace": _ppplan(work, "profile", "--from-trace", f"traces{r}", "--out", f"T{r}.json"),
    }
    replay = json.loads((work / f"r{r}.json").read_text())
    facts = {"walls_s": walls, "replay_step_ms": round(1e3 * replay["measured"]["step_time_s"], 1),
             "trace_busy_share": _busy_share(work / f"traces{r}", replay["measured"]["busy_s"], steps, ep)}
    return facts, json.loads((work / f"T{r}.json").read_text())


def _spread(values: list[float]) -> float | None:
    """Largest over smallest of a field's per-round values (None when one is 0): how far the
    same command moves from one round to the next on this machine."""
    return round(max(values) / min(values), 3) if min(values) > 0 else None


def compare_rounds(gots: list[dict], refs: list[dict], provenance: dict) -> list[dict]:
    """Per layer type and field, the median over rounds of the trace's value (``gots``, one
    ``_per_type`` table per round) against the profile's (``refs``), their ratio and whether it
    is within ``TARGET``; with two rounds or more also each round's values and each side's spread."""
    rows = []
    for t in gots[0]:
        for k in _FIELDS:
            tr, pr = [g[t][k] for g in gots], [p[t][k] for p in refs]
            a, b = statistics.median(tr), statistics.median(pr)
            row = {"type": t, "field": k, "trace_ms": round(1e3 * a, 3), "profile_ms": round(1e3 * b, 3),
                   "ratio": round(a / b, 3) if b > 0 else None, "within_target": b > 0 and abs(a / b - 1) <= TARGET,
                   "provenance": provenance[t][k]}
            if len(gots) > 1:
                row |= {"trace_rounds_ms": [round(1e3 * v, 3) for v in tr],
                        "profile_rounds_ms": [round(1e3 * v, 3) for v in pr],
                        "trace_spread": _spread(tr), "profile_spread": _spread(pr)}
            rows.append(row)
    return rows


def cpu_figures(*, model: str, scale: float, ep: int, steps: int, seq_len: int, microbatches: int,
                micro_batch: int, schedule: str = "zb-h1", rounds: int = 1, repeats: int = 5,
                also_alone: bool = False, also_one_group: bool = False) -> dict:
    """The CPU loop, every step through the CLI; walls in seconds. The profile measures the
    microbatch the plan runs (``micro_batch`` sequences, checked against the plan), so both
    tables hold the same shape's times. With ``rounds`` > 1 the profile and the traced replay
    run alternately that many times on the same plan and each side's field is the median of
    its rounds: a slow phase of the machine then falls on both sides, and each side's own
    round-to-round spread (``spread``) says how close two runs of the same command come."""
    work = Path(tempfile.mkdtemp(prefix="ppplan-trace-"))
    shape = ["--seq-len", str(seq_len)]
    groups = profile_groups(ep)
    prof = dict(model=model, scale=scale, ep=ep, shape=shape, micro_batch=micro_batch, repeats=repeats, groups=groups)
    extra = _extra_profiles(also_alone=also_alone, also_one_group=also_one_group)
    walls = {"profile": _profile(work, 0, **prof),
             "plan": _ppplan(work, "plan", model, "--profile", "P0.json", "--pp", str(PP), "--ep", str(ep), "--schedule",
                             schedule, "--microbatches", str(microbatches), *shape, "--quiet", "--out", "plan.json")}
    size = json.loads((work / "plan.json").read_text())["microbatches"]["size"]
    if size != micro_batch:
        raise SystemExit(f"the plan runs microbatches of {size} sequences, the profile measured {micro_batch}: "
                         f"pass --micro-batch {size}")
    per_round, tables = [], []
    for r in range(rounds):
        profiled = {"profile": _profile(work, r, **prof)} if r else {}  # round 0's profile made the plan
        for name, overrides in extra.items():
            profiled[f"profile_{name}"] = _profile(work, r, **(prof | overrides))
        facts, table = _loop_round(work, r, ep=ep, steps=steps)
        facts["walls_s"] = profiled | facts["walls_s"]
        per_round.append(facts)
        tables.append(table)
    walls["plan_from_trace"] = _ppplan(work, "plan", model, "--profile", "T0.json", "--pp", str(PP), "--ep", str(ep),
                                       "--microbatches", str(microbatches), *shape, "--quiet", "--out", "plan2.json")
    def profiles(prefix: str) -> list[dict]:
        return [_per_type(json.loads((work / f"{prefix}{r}.json").read_text())) for r in range(rounds)]

    refs = profiles("P")
    metas = [t["meta"]["trace"] for t in tables]
    meta = metas[0]
    gots = [_per_type(t) for t in tables]
    rows = compare_rounds(gots, refs, meta["provenance"]["layers"])
    beside = {name: compare_rounds(gots, profiles(o["out"]), meta["provenance"]["layers"]) for name, o in extra.items()}
    shutil.rmtree(work, ignore_errors=True)
    compared = [r for r in rows if r["profile_ms"] > 0]
    out = {"model": model, "scale": scale, "pp": PP, "ep": ep, "groups": groups, "schedule": schedule, "steps": steps,
           "seq_len": seq_len,
           "microbatches": microbatches, "micro_batch": micro_batch, "rounds": rounds, "repeats": repeats,
           "profiler_overhead_us_per_event": {r: round(1e6 * v, 3) for r, v in
                                              meta.get("profiler_overhead_s_per_event", {}).items()},
           "walls_s": walls, "samples": meta["samples"], "hidden_share": meta["hidden_share"], "rows": rows,
           "replay_step_ms": per_round[0]["replay_step_ms"], "trace_busy_share": per_round[0]["trace_busy_share"],
           "within_target": sum(r["within_target"] for r in compared), "compared": len(compared)}
    for name, other in beside.items():
        out[f"rows_{name}"] = other
        out[f"within_target_{name}"] = sum(r["within_target"] for r in other if r["profile_ms"] > 0)
    if rounds > 1:
        out["rounds_detail"] = per_round
        out["hidden_share_rounds"] = [m["hidden_share"] for m in metas]
        # the noise floor: fields whose own rounds stay within the target of each other, per side
        out["profile_self_within_target"] = sum(1 for r in compared if r["profile_spread"] and
                                                r["profile_spread"] <= 1 + TARGET)
        out["trace_self_within_target"] = sum(1 for r in compared if r["trace_spread"] and
                                              r["trace_spread"] <= 1 + TARGET)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", choices=("hta", "cpu"))
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--scale", type=float, default=0.03)
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2, help="Timed (traced) replay steps: the work of the loop.")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=4, help="Sequences per microbatch the profile measures: the "
                                                              "size the plan runs (the model's cluster file's global "
                                                              "batch over dp and --microbatches).")
    ap.add_argument("--schedule", default="zb-h1", help="The plan's --schedule (1f1b-overlap: fused pairs, whose "
                                                        "other half runs beside each all-to-all).")
    ap.add_argument("--rounds", type=int, default=1, help="Profile and traced replay run alternately this many times "
                                                           "on one plan; each side's field is its rounds' median.")
    ap.add_argument("--repeats", type=int, default=5, help="The profile's --repeats (timed runs per layer type).")
    ap.add_argument("--also-alone", action="store_true", help="Every round also runs ppplan profile --alone (one "
                                                               "process times, the other idles); rows_alone compares "
                                                               "the trace with it.")
    ap.add_argument("--also-one-group", action="store_true", help="With --ep above 1, every round also runs the "
                                                                   "profile with one expert-parallel group (ep "
                                                                   "processes, no --groups); rows_one_group compares "
                                                                   "the trace with it.")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        ap.error("--rounds and --repeats take a whole number of at least 1")
    if args.ep > 1 and args.also_alone:
        ap.error("--also-alone compares the --ep 1 profile's two processes; at --ep above 1 every process of a "
                 "group measures (use --also-one-group)")
    if args.ep == 1 and args.also_one_group:
        ap.error("--also-one-group needs --ep above 1: at --ep 1 the profile runs no --groups already")
    out = {}
    if args.only in (None, "hta"):
        out["hta"] = hta_figures()
    if args.only in (None, "cpu"):
        out["cpu"] = cpu_figures(model=args.model, scale=args.scale, ep=args.ep, steps=args.steps,
                                 seq_len=args.seq_len, microbatches=args.microbatches,
                                 micro_batch=args.micro_batch, schedule=args.schedule, rounds=args.rounds,
                                 repeats=args.repeats, also_alone=args.also_alone,
                                 also_one_group=args.also_one_group)
    if args.json:
        print(json.dumps(out, indent=1))
        return
    if "hta" in out:
        h = out["hta"]
        print(f"HTA trace: overlap {h['overlap_pct']}% (HTA {h['hta_overlap_pct']}%), equal: {h['equal']}")
    if "cpu" in out:
        for r in out["cpu"]["rows"]:
            print(f"{r['type']:10} {r['field']:6} trace {r['trace_ms']:9.3f} ms  profile {r['profile_ms']:9.3f} ms  "
                  f"ratio {r['ratio']}")


if __name__ == "__main__":
    main()
