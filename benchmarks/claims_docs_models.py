"""Claims of the model and framework pages: docs/targets.md, degrees.md, replan.md,
profiler.md, frameworks.md, and the measured pages listed stale (gpu, published, overlap,
replay, transformers-profiler, costs)."""

from __future__ import annotations

import re

from claim_kit import Claim, Page, Ratio, Stale, row_pattern
from claim_outputs import (CPU_TIME, DEGREES, ELASTIC, ELASTIC_8192, FRAMEWORKS, PROFILER, REPLAN, TARGETS, WALL, by, history,
                           minutes, span, text)

__all__ = ["CLAIMS"]

_TG = "docs/targets.md"
_TS = "## What each framework's menu costs"
TARGET_NAMES = ("torch", "megatron", "torchtitan", "deepspeed")
TARGET_ROWS = [(m, v) for m in ("llama3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b", "deepseek-v3")
               for v in (1, 2)]
_REFUSALS = (("stage per rank", "1 stage per rank"), ("MTP module", "no MTP module"),
             ("divisible by pp", "needs M % pp == 0"))
"""Words of the planner's refusal -> how the table names it."""


def _target_cell(rows: list[dict], model: str, vpp: int, target: str) -> str:
    r = by(rows, model=model, vpp=vpp, target=target)
    if r["status"] != "planned":
        return "refused: " + next((short for words, short in _REFUSALS if words in r["reason"]), r["reason"][:40])
    base = by(rows, model=model, vpp=vpp, target="torch")
    ratio = "" if target == "torch" else f" ({r['step_time_s'] / base['step_time_s']:.3f}x)"
    return f"{r['step_time_s']:.3f} s{ratio} {r['schedule']}, {r['recompute']}"


def _ratios(run, target: str, models: tuple[str, ...], vpp: int) -> list[float]:
    rows = run.json()["rows"]
    return [by(rows, model=m, vpp=vpp, target=target)["step_time_s"] / by(rows, model=m, vpp=vpp, target="torch")
            ["step_time_s"] for m in models]


def _torchtitan_span(run) -> tuple[float, float]:
    rows = [r for r in run.json()["rows"] if r["target"] == "torchtitan" and r["status"] == "planned"]
    return span([r["step_time_s"] / by(run.json()["rows"], model=r["model"], vpp=r["vpp"], target="torch")
                 ["step_time_s"] for r in rows])


TARGET_CLAIMS = [
    Claim(id=f"targets-{m.split('-')[0]}-{m.split('-')[1]}-vpp{v}", where=f"menu table, {m} vpp {v}",
          figure=Page(path=_TG, section=_TS, pattern=row_pattern(m, str(v), cells=4)), command=TARGETS,
          measured=lambda run, k=(m, v): tuple(_target_cell(run.json()["rows"], *k, t) for t in TARGET_NAMES))
    for m, v in TARGET_ROWS] + [
    Claim(id="targets-megatron-vpp1", where="menu prose: Megatron at vpp 1 on the MoE models, and on DeepSeek-V3",
          command=TARGETS,
          figure=Page(path=_TG, section=_TS, pattern=r"it is ([\d.]+)-([\d.]+)x, on DeepSeek-V3 ([\d.]+)x"),
          measured=lambda run: (*span(_ratios(run, "megatron", ("qwen3-30b-a3b", "qwen3-next-80b-a3b"), 1)),
                                *_ratios(run, "megatron", ("deepseek-v3",), 1))),
    Claim(id="targets-megatron-vpp2", where="menu prose: Megatron at vpp 2, and the search's shortfall",
          command=TARGETS,
          figure=Page(path=_TG, section=_TS, pattern=r"Qwen3-Next is ([\d.]+)x, and on Qwen3-30B-A3B Megatron's own\n"
                      r"interleaved-overlap order is ([\d.]+)x[\s\S]*?order (\d+)% slower"),
          measured=lambda run: (*_ratios(run, "megatron", ("qwen3-next-80b-a3b", "qwen3-30b-a3b"), 2),
                                100 * (1 / _ratios(run, "megatron", ("qwen3-30b-a3b",), 2)[0] - 1))),
    Claim(id="targets-torchtitan", where="menu prose: torchtitan behind the full search", command=TARGETS,
          figure=Page(path=_TG, section=_TS, pattern=r"torchtitan is ([\d.]+)-([\d.]+)x behind in every planned row,\n"
                      r"dense Llama included \(([\d.]+)x;"),
          measured=lambda run: (*_torchtitan_span(run), *_ratios(run, "torchtitan", ("llama3-8b",), 1))),
    Claim(id="targets-cells", where="menu: how many cells", command=TARGETS,
          figure=Page(path=_TG, section=_TS, pattern=r"\((\d+) cells in [\d.]+ s"),
          measured=lambda run: len(run.json()["rows"])),
    Claim(id="targets-wall", where="menu: the whole run's wall time", command=TARGETS,
          figure=Page(path=_TG, section=_TS, pattern=r"\(\d+ cells in ([\d.]+) s"),
          measured=lambda run: run.wall_s, compare=WALL),
]

_DG = "docs/degrees.md"
_DS = "## Degree search"


def _degree_table(run) -> tuple[str, ...]:
    rows = re.findall(r"^\s+(\d+(?:\s+\S+){12})\s*$", run.stdout.split("degree search for", 1)[1], re.MULTILINE)
    return tuple(tok for row in rows[:10] for tok in row.split())


DEGREE_CLAIMS = [
    Claim(id="degrees-wall", where="degree search: wall time", command=DEGREES,
          figure=Page(path=_DG, section=_DS, pattern=r"([\d.]+) s wall \([\d.]+ s CPU\)"),
          measured=lambda run: run.wall_s, compare=WALL),
    Claim(id="degrees-cpu", where="degree search: CPU time", command=DEGREES,
          figure=Page(path=_DG, section=_DS, pattern=r"[\d.]+ s wall \(([\d.]+) s CPU\)"),
          measured=lambda run: run.cpu_s, compare=WALL),
    Claim(id="degrees-table", where="degree search: the top-10 table of the closed-form screen", command=DEGREES,
          figure=Page(path=_DG, section=_DS, pattern=r"^rank  tp  pp .*\n((?: *\d+ .*\n){10})",
                      combine=lambda cells: tuple(cells[0].split())),
          measured=_degree_table),
    Claim(id="degrees-planned-fully", where="degree search: the two fully planned configurations", command=DEGREES,
          figure=Page(path=_DG, section=_DS, pattern=r"^planned fully: (\S+ \S+ \S+ \S+ \S+ \S+ \S+): ([\d.]+) s .*\n"
                      r"planned fully: (\S+ \S+ \S+ \S+ \S+ \S+ \S+): ([\d.]+) s"),
          measured=text(r"^planned fully: (\S+ \S+ \S+ \S+ \S+ \S+ \S+): ([\d.]+) s .*\n"
                        r"planned fully: (\S+ \S+ \S+ \S+ \S+ \S+ \S+): ([\d.]+) s")),
    Claim(id="degrees-written", where="degree search: the plan written", command=DEGREES,
          figure=Page(path=_DG, section=_DS, pattern=r"The plan written is the screen's first choice, tp (\d+), pp (\d+), vpp \d+, "
                      r"ep (\d+), dp (\d+), recompute (\w+):"),
          measured=lambda run: (*(run.file_json("plan.json")["parallel"][k] for k in ("tp", "pp", "ep", "dp")),
                                run.file_json("plan.json")["cluster"]["training"]["recompute"])),
]

_RP = "docs/replan.md"
_RS = "## Re-planning after routing drift"
REPLAN_ROWS = ("start", "balanced", "hot_early", "hot_late", "drift_last", "drift_all")


def _replan_cells(run, case: str) -> tuple:
    r = by(run.json()["rows"], case=case)
    old = f"{r['old_step_s']:.3f} s" + ("" if r["old_fits_memory"] else " (exceeds memory)")
    be = r["break_even_steps"]
    migration = f"{r['migration_bytes'] / 1e9:.0f} GB, {r['migration_s']:.2f} s" + \
        (f", break-even {be} step{'s' if be != 1 else ''}" if be else "")
    return (old, f"{r['new_step_s']:.3f} s", 100 * r["gain"], r["moved_layers"], migration, r["decision"],
            "same" if r["megatron"]["agree"] else "differs", r["megatron"]["bytes"] / 1e6)


REPLAN_CLAIMS = [
    Claim(id=f"replan-{case}", where=f"re-planning table, trace {case}", command=REPLAN,
          figure=Page(path=_RP, section=_RS, pattern=rf"^\| {case}(?: \([^)]*\))? \|([^|\n]*)\|([^|\n]*)\|"
                      r"\s*(-?[\d.]+)%\s*\|([^|\n]*)\|([^|\n]*)\|([^|\n]*)\|\s*(same)[^(|]*\(([\d.]+) MB\)\s*\|$"),
          measured=lambda run, c=case: _replan_cells(run, c))
    for case in REPLAN_ROWS] + [
    Claim(id="replan-recovered", where="re-planning prose: the gap recovered per hot case", command=REPLAN,
          figure=Page(path=_RP, section=_RS, pattern=r"\(hot_late ([\d.]+)%, drift_last\nand drift_all (\d+)%\)"),
          measured=lambda run: (100 * by(run.json()["rows"], case="hot_late")["gap_recovered"],
                                100 * min(by(run.json()["rows"], case=c)["gap_recovered"]
                                          for c in ("drift_last", "drift_all")))),
    Claim(id="replan-row-wall", where="re-planning prose: one re-plan's wall time", command=REPLAN,
          figure=Page(path=_RP, section=_RS, pattern=r"single-file trace took ([\d.]+)-([\d.]+) s"),
          measured=lambda run: span([r["wall_s"] for r in run.json()["rows"]]), compare=WALL),
    Claim(id="replan-run-wall", where="re-planning: the whole run's wall time", command=REPLAN,
          figure=Page(path=_RP, section=_RS, pattern=r"[\d.]+ at the end\), (\d+ min \d+ s);",
                      combine=lambda c: (str(60 * int(c[0].split()[0]) + int(c[0].split()[2])),)),
          measured=lambda run: run.wall_s, compare=WALL),
    history("replan-7de3bf2", _RP, "the run before, at commit 7de3bf2", _RS, r"commit 7de3bf2, (\d{4}-\d\d-\d\d)"),
]

_ES = "## Re-planning after lost GPUs"
ELASTIC_ROWS = ("qwen3-next-lose1", "qwen3-next-node", "qwen3-next-12.5%", "qwen3-235b-lose1", "qwen3-235b-node",
                "qwen3-235b-12.5%", "deepseek-v3-1024-lose1", "deepseek-v3-1024-node", "deepseek-v3-1024-12.5%")


def _elastic_cells(run, case: str) -> tuple:
    r = by(run.json()["rows"], case=case)
    d = r["degrees_after"]
    return (f"{r['gpus_before']} / {r['gpus_available']} / {r['gpus_used']}",
            f"tp {d['tp']}, pp {d['pp']}, ep {d['ep']}, dp {d['dp']}",
            f"{r['step_before_s']:.3f} -> {r['step_after_s']:.3f} s", 100 * r["throughput_per_gpu_kept"],
            100 * r["throughput_per_gpu_kept_vs_full"],
            f"{r['bytes_moved'] / 1e9:.0f} GB ({r['link_bytes']['checkpoint'] / 1e9:.0f} GB)", r["migration_s"])


ELASTIC_CLAIMS = [
    Claim(id=f"elastic-{case.replace('%', 'pct')}", where=f"lost-GPU table, case {case}", command=ELASTIC,
          figure=Page(path=_RP, section=_ES, pattern=row_pattern(case, cells=7)),
          measured=lambda run, c=case: _elastic_cells(run, c))
    for case in ELASTIC_ROWS] + [
    Claim(id="elastic-checks", where="lost-GPU prose: every re-plan valid, in memory, global batch kept",
          command=ELASTIC,
          figure=Page(path=_RP, section=_ES, pattern=r"`all_valid: (\w+)`,\s+`all_fit: (\w+)`,\s+`all_batch_kept: (\w+)`"),
          measured=lambda run: tuple(run.json()["summary"][k] for k in ("all_valid", "all_fit", "all_batch_kept"))),
    Claim(id="elastic-1024-wall", where="lost-GPU prose: the slowest 1024-GPU re-plan, wall", command=ELASTIC,
          figure=Page(path=_RP, section=_ES, pattern=r"at 1024 GPUs took at most ([\d.]+) s wall"),
          measured=lambda run: run.json()["summary"]["max_wall_s_1024"], compare=WALL),
    Claim(id="elastic-1024-cpu", where="lost-GPU prose: the slowest 1024-GPU re-plan, CPU", command=ELASTIC,
          figure=Page(path=_RP, section=_ES, pattern=r"at 1024 GPUs took at most [\d.]+ s wall and ([\d.]+) s CPU"),
          measured=lambda run: run.json()["summary"]["max_cpu_s_1024"], compare=CPU_TIME),
    Claim(id="elastic-run-wall", where="lost-GPU table: the whole run's wall time", command=ELASTIC,
          figure=Page(path=_RP, section=_ES, pattern=r"UTC, (\d+ min \d+ s|\d+ s) for the whole run", combine=minutes),
          measured=lambda run: run.wall_s, compare=WALL),
] + [
    Claim(id=f"elastic-{case}", where=f"8192-GPU lost-GPU table, case {case}", command=ELASTIC_8192,
          figure=Page(path=_RP, section=_ES, pattern=row_pattern(case, cells=7)),
          measured=lambda run, c=case: _elastic_cells(run, c))
    for case in ("deepseek-v3-8192-lose1", "deepseek-v3-8192-node")] + [
    Claim(id="elastic-8192-wall", where="lost-GPU prose: the slowest 8192-GPU re-plan, wall", command=ELASTIC_8192,
          figure=Page(path=_RP, section=_ES, pattern=r"at 8192 GPUs took at most ([\d.]+) s wall"),
          measured=lambda run: run.json()["summary"]["max_wall_s_8192"], compare=WALL),
    Claim(id="elastic-8192-cpu", where="lost-GPU prose: the slowest 8192-GPU re-plan, CPU", command=ELASTIC_8192,
          figure=Page(path=_RP, section=_ES, pattern=r"at 8192 GPUs took at most [\d.]+ s wall and ([\d.]+) s CPU"),
          measured=lambda run: run.json()["summary"]["max_cpu_s_8192"], compare=CPU_TIME),
    Claim(id="elastic-8192-run-wall", where="8192-GPU lost-GPU run: its wall time", command=ELASTIC_8192,
          figure=Page(path=_RP, section=_ES, pattern=r"UTC, (\d+ min \d+ s|\d+ s) for that run", combine=minutes),
          measured=lambda run: run.wall_s, compare=WALL),
    history("replan-vs-oobleck", _RP, "every figure of the side by side with Oobleck's simulator",
            "## Side by side with Oobleck", r"re-run on (\d{4}-\d\d-\d\d)\s+at\s+\d\d:\d\d-\d\d:\d\d\s+UTC",
            command="python benchmarks/vs_oobleck.py --oobleck-dir /tmp/oobleck-art --json",
            why="needs Oobleck's simulator (SymbioticLab/Oobleck, branch sosp23-artifact) in /tmp/oobleck-art"),
]

_PF = "docs/profiler.md"
_PS = "## Measured profiler"
PROFILED = {"qwen3-next-80b-a3b": ("embedding", "linear+moe", "gqa+moe", "mtp:gqa+moe", "head"),
            "deepseek-v3": ("embedding", "mla+dense", "mla+moe", "mtp:mla+moe", "head")}


def _profile_ms(run, model: str) -> tuple[float, ...]:
    layers = run.json()["models"][model]["layers"]
    return tuple(layers[t][k] for t in PROFILED[model] for k in ("f_ms", "i_ms", "w_ms", "b_ms"))


def _profile_pattern(model: str) -> str:
    return r"\n".join(row_pattern(model, t, then=r"\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|.*")
                      for t in PROFILED[model])


PROFILER_CLAIMS = [
    Claim(id="profiler-walls", where="measured profiler: wall time per model", command=PROFILER,
          figure=Page(path=_PF, section=_PS, pattern=r"1/16 width \(hidden 128\) profiled in \*\*([\d.]+) s\*\*, "
                      r"DeepSeek-V3\nat 1/32 width \(hidden 224\) in \*\*([\d.]+) s\*\*"),
          measured=lambda run: tuple(run.json()["models"][m]["wall_s"] for m in PROFILED), compare=WALL),
] + [
    Claim(id=f"profiler-layers-{model.split('-')[0]}", where=f"measured profiler table: {model} F/I/W/B ms (in total)",
          command=PROFILER, figure=Page(path=_PF, section=_PS, pattern=_profile_pattern(model)),
          measured=lambda run, m=model: _profile_ms(run, m), compare=Ratio(WALL.factor, WALL.why, total=True))
    for model in PROFILED] + [
    history("profiler-hidden-shares", _PF, "hidden shares and B / (I + W) of one run (noise on a CPU, as the page "
            "says)", _PS, r"first recorded (\d{4}-\d\d-\d\d)",
            why="per-pair shares and ratios of single CPU timings: the page itself calls them noise of that size"),
]

_FW = "docs/frameworks.md"
FRAMEWORK_ROWS = (("Megatron-Core", "Megatron-Core"), ("Megatron-Bridge", "Megatron-Bridge"),
                  ("torchtitan", "torchtitan"), ("torchtitan main (fixture)", "torchtitan main \\(fixture\\)"),
                  ("DeepSpeed", "DeepSpeed"), ("torch", "torch"))


def _framework(run, name: str) -> tuple:
    row = by(run.json()["checks"], framework=name)
    version = row["version"][:12] if len(row["version"]) == 40 else row["version"]  # a commit: its short form
    return version, row["accepted"], row["total"]


FRAMEWORK_CLAIMS = [
    Claim(id=f"frameworks-{name.split()[0].lower()}{'-main' if 'main' in name else ''}", command=FRAMEWORKS,
          where=f"acceptance table, {name}: version and accepted / total",
          figure=Page(path=_FW, pattern=rf"^\| {pattern} \| ([^|]+) \|[^|]+\|[^|]+\| (\d+) / (\d+) \|"),
          measured=lambda run, n=name: _framework(run, n))
    for name, pattern in FRAMEWORK_ROWS] + [
    Claim(id="frameworks-megatron-lm", where="acceptance table, Megatron-LM (needs its source tree)",
          command="python benchmarks/frameworks.py --json --work 3 --megatron-lm /tmp/mlm@core_v0.16.1",
          figure=Page(path=_FW, pattern=r"^\| Megatron-LM \| [^|]+ \|[^|]+\|[^|]+\| (\d+) / (\d+) \|"),
          stale=Stale(why="needs Megatron-LM's megatron/training source (in no wheel) in /tmp/mlm, and the run's "
                          "1 min 43 s wall is of that command", date=Page(path=_FW, pattern=r"^on (\d{4}-\d\d-\d\d) "
                                                                                        r"from 14:19:29"))),
    history("frameworks-deepspeed-train-batch", _FW, "the two-process DeepSpeed train_batch test's durations",
            "", r"a tiny stand-in, 16 microbatches\)[\s\S]*?first recorded (\d{4}-\d\d-\d\d)",
            why="durations of tests/test_export_deepspeed.py "
            "measured once at load 11-17; no command prints them"),
]

STALE_PAGES = [
    history("gpu-h200", "docs/gpu.md", "every figure of the GPU check (GEMM rates, layer times, scale 1/16 runs)",
            "", r"^Measured on one H200 on (\d{4}-\d\d-\d\d)", command="python benchmarks/gpu_check.py --out FILE",
            why="needs a GPU"),
    history("published-eight-rows", "docs/published.md", "the eight-row round's fit and leave-one-out figures", "",
            r"^Date not recorded \(first recorded (\d{4}-\d\d-\d\d)\)",
            command="python benchmarks/published.py --fit --json",
            why="history: the benchmark then predicted through the closed-form estimate; it has changed since"),
    history("published-user-path-eight-rows", "docs/published-user-path.md", "the eight rows through ppplan plan",
            "", r"^Run on (\d{4}-\d\d-\d\d) 13:42", command="python benchmarks/published.py --json",
            why="history: made under the constants fitted on those eight rows; 3 min of planning"),
    history("published-validation", "docs/published-validation.md", "every table of the 101-row validation", "",
            r"^Run on (\d{4}-\d\d-\d\d) 23:15", command="python benchmarks/published.py --fit --jobs 2 --json",
            why="51 min of planning 101 rows three ways plus the held-out folds"),
    history("overlap-emulated", "docs/overlap.md", "the eight emulated-link runs (a) and (b)",
            "## Emulated link", r"all (\d{4}-\d\d-\d\d)\)",
            command="python benchmarks/overlap.py --json --steps 20 --reps 9 --skip-real --work 2",
            why="eight runs of 3-4 min each, measured on the replay's processes"),
    history("overlap-real-link", "docs/overlap.md", "the oversubscribed real-link row (c)", "## Real gloo link",
            r"^At commit 51641da \((\d{4}-\d\d-\d\d)\)", command="python benchmarks/overlap.py --json --only-real "
            "--real-steps 5 --work 2", why="81 s of four oversubscribed processes; the page says it resolves nothing"),
    history("overlap-capacity", "docs/overlap.md", "dropless against capacity-mode layer times", "## MoE capacity mode",
            r"first recorded (\d{4}-\d\d-\d\d)\), dropless", why="two hand runs of ppplan profile each way, at "
            "load 2.0-2.2; no command compares them"),
    history("replay-runs", "docs/replay.md", "the five replay runs", "## Runs on this page",
            r"^\| 5\. .*? \| not recorded \(first recorded (\d{4}-\d\d-\d\d)\)", command="python benchmarks/replay.py "
            "--json --steps 10", why="3-18 min each of two-process replays; errors of two timings on a loaded machine"),
    history("replay-honest", "docs/replay-honest.md", "the user's-path replays and the order changed by hand",
            "## Commands", r"^Run on (\d{4}-\d\d-\d\d) between 13:44", why="four replays of 3.5-4.5 min each at "
            "load 11-19, and a profile of 49 s"),
    history("replay-honest-ep2", "docs/replay-honest.md", "the --ep 2 replays", "## `--ep 2` on the user's path",
            r"^(\d{4}-\d\d-\d\d) 14:56-15:05 UTC", why="four-process replays (each rank half a core)"),
    history("transformers-profiler", "docs/transformers-profiler.md", "the side-by-side thread-CPU tables, the wall "
            "profiles and the replays on transformers' layers", "## Figures",
            r"^Measured on (\d{4}-\d\d-\d\d), 13:27-14:20 UTC", why="profiles of 44-502 s and replays of 202-376 s "
            "each, at load 10-19"),
    history("transformers-profiler-qwen15", "docs/transformers-profiler.md", "Qwen1.5-MoE-A2.7B end to end",
            "## Any Hugging Face config.json", r"^Measured on (\d{4}-\d\d-\d\d) \(load average 11-16",
            why="needs the public model's config.json in a folder of its own; profile 157 s, replay 112 s"),
    history("costs-full-backward", "docs/costs.md", "a full backward's cost against I + W on CPU", "",
            r"`benchmarks/replay.py`, first recorded (\d{4}-\d\d-\d\d)",
            why="from the replay benchmark's second run (docs/replay.md, first recorded 2026-12-01)"),
]

_PU = "docs/published-user-path.md"
_MEMORY_RUN = ("ppplan plan qwen3-30b-a3b --cluster benchmarks/data/clusters/mb-qwen3-30b-a3b-ep16-memory.yaml "
               "--target megatron --out plan.json --quiet")
_MEMORY_ROW = r"^\| mb-qwen3-30b-a3b-ep16-memory \| ([\d.]+) GiB \| ([\d.]+) GiB \(\+([\d.]+)%\) \| (\S+) "


def _memory_row(run) -> tuple:
    """Measured peak (the row's input), the plan's rank-0 peak, its excess, its schedule."""
    plan = run.file_json("plan.json")
    peak = plan["predicted"]["peak_memory_bytes"][0] / 2**30
    return ("62.2", f"{peak:.2f}", f"{100 * (peak / 62.2 - 1):.1f}", plan["solver"]["schedule"])


MEMORY_CLAIMS = [
    Claim(id="published-memory-ep16", where="published runs: the Megatron-Bridge Qwen3-30B-A3B EP 16 memory row",
          command=_MEMORY_RUN, figure=Page(path=_PU, section="## Memory", pattern=_MEMORY_ROW),
          measured=_memory_row),
]

CLAIMS = MEMORY_CLAIMS + TARGET_CLAIMS + DEGREE_CLAIMS + REPLAN_CLAIMS + ELASTIC_CLAIMS + PROFILER_CLAIMS + FRAMEWORK_CLAIMS + STALE_PAGES
