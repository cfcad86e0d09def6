"""Claims of README.md: the main job's summary, the pair shares it quotes, and every row of
the "Headline figures" table (each re-derived from the command its page documents, or
listed stale with that page's date)."""

from __future__ import annotations

from claim_kit import Claim, InRange, Page, Stale
from claim_outputs import (BUDGET_QUICK, CAP_KEPT, CPU_TIME, DEGREES, DETERMINISM, FRAMEWORKS, FUZZ, HOSTILE, JOINT,
                           JOINT_STALE, PARTITION, PLAN, PLAN_LOAD, PROFILER, PROFILE_ANALYTICAL, REPLAN, SCHEDULE,
                           SIMULATOR, TARGETS, VS_ZB, WALL, ZB_SETTING, by, partition_row, pct, ratio_text, span,
                           text)

__all__ = ["CLAIMS"]

_HEAD = "## Headline figures"
_MISSES = ("mb-26.02-h100-qwen3-30b-a3b-fp8-16gpu", "mb-25.11-qwen3-30b-a3b", "mb-25.11-b200-qwen3-30b-a3b-fp8mx-8gpu",
           "torchtitan-2024-12-h100-hbm2e-llama3-8b-8gpu-fsdp1-cp8-seq256k-float8",
           "automodel-20260410-h100-llama3-70b-64gpu-cp2",
           "modelzoo-20250527-h100-qwen3-235b-a22b-tp2ep8-fsdp", "automodel-20251008-h100-qwen3-30b-a3b-8gpu")
"""The published rows the README names as outside 0.67-1.5, in its order."""
_EDGE = ("mb-25.11-gb200-llama31-405b-fp8cs-256gpu", "mb-26.04-gb200-deepseek-v3-mxfp8-256gpu")
"""The memory-edge rows the README names as inside since the partition search's memory repair."""


def _held_out_headline(run) -> tuple:
    """Rows, held-out median, planned, refused, ratio range and rows outside 0.67-1.5 of
    ``published.py --fit``."""
    res = run.json()
    s = res["summary"]["held_out"]
    return (len(res["rows"]), s["median_abs_ln"], s["planned"], s["refused"],
            f"{s['ratio_min']:.2f}-{s['ratio_max']:.2f}", s["outside"])


def _readme(pattern: str, section: str = _HEAD) -> Page:
    return Page(path="README.md", pattern=pattern, section=section)


def _date(path: str, pattern: str) -> Page:
    return Page(path=path, pattern=pattern)


def _hidden(pairs: list[dict], keep) -> tuple[float, float]:
    return span([pct(p["hidden_share"]) for p in pairs if keep(p["f_type"], p["b_type"])])


def _moe(t: str) -> bool:
    return t.endswith("+moe") and not t.startswith("mtp:")


def _with_head(a: str, b: str) -> bool:
    return "head" in (a, b) and ("moe" in a or "moe" in b)


def _partition(run) -> tuple[float, ...]:
    return tuple(partition_row(run, "qwen3-next-80b-a3b", pp, 1, mem)["speedup"]["serial_balanced"]
                 for mem in ("default", "relaxed") for pp in (8, 16))


def _joint_2p(run) -> tuple[float, ...]:
    rows = [r for r in run.json()["rows"] if r["memory_allows_2p"]]
    return (pct(min(r["gap_to_lower_bound"] for r in rows)), pct(max(r["gap_to_lower_bound"] for r in rows)))


def _schedule(run) -> tuple:
    rows, gaps = run.json()["rows"], [r["gap"] for r in run.json()["rows"] if r["target_2pct"] is not None]
    return (ratio_text(sum(r["not_slower_than_heuristic"] for r in rows), len(rows)),
            pct(min(gaps)), pct(max(gaps)))


def _targets(run) -> tuple[float, ...]:
    rows = [r for r in run.json()["rows"] if r["status"] == "planned"]
    out = []
    for vpp in (1, 2):
        ratios = [by(rows, model=m, vpp=vpp, target="megatron")["step_time_s"]
                  / by(rows, model=m, vpp=vpp, target="torch")["step_time_s"]
                  for m in ("qwen3-30b-a3b", "qwen3-next-80b-a3b")]
        out += span(ratios)
    return tuple(out)


def _frameworks(run) -> tuple[str, ...]:
    rows = run.json()["checks"]
    names = ("Megatron-Bridge", "torchtitan main (fixture)", "torchtitan", "DeepSpeed", "torch")
    return tuple(ratio_text(by(rows, framework=n)["accepted"], by(rows, framework=n)["total"]) for n in names)


def _replan(run) -> tuple[str, str]:
    out = run.json()
    moved = [r["gap_recovered"] for r in out["rows"] if r["moved_layers"] and r["gap_recovered"] is not None]
    return f"{round(100 * min(moved))}%", "same" if out["targets"]["megatron_logs_agree"] else "differ"


RUN_BLOCK = [
    Claim(id="readme-run-header", where="What a run looks like: the summary's first line",
          figure=_readme(r"^(model qwen3-next-80b-a3b .*)$", "## What a run looks like"), command=PLAN,
          measured=text(r"^(model \S+  pp .*)$")),
    Claim(id="readme-run-stages", where="What a run looks like: the stage table",
          figure=_readme(r"^(stage rank\s+layers.*\n(?:\s+\d+\s+\d+\s+\[.*\n)+)", "## What a run looks like"),
          command=PLAN, measured=text(r"^(stage rank\s+layers.*\n(?:\s+\d+\s+\d+\s+\[.*\n)+)")),
    Claim(id="readme-run-ranks", where="What a run looks like: peak memory and busy time per rank",
          figure=_readme(r"^(rank\s+peak GiB.*\n(?:\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\n)+)", "## What a run looks like"),
          command=PLAN, measured=text(r"^(rank\s+peak GiB.*\n(?:\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\n)+)")),
    Claim(id="readme-run-predicted", where="What a run looks like: predicted step, bubble, MFU, lower bound",
          figure=_readme(r"^predicted step ([\d.]+) s\s+bubble ([\d.]+)%\s+MFU ([\d.]+)%\s+lower bound ([\d.]+) s",
                         "## What a run looks like"),
          command=PLAN, measured=text(r"^predicted step ([\d.]+) s\s+bubble ([\d.]+)%\s+MFU ([\d.]+)%\s+"
                                      r"lower bound ([\d.]+) s")),
    Claim(id="readme-run-optimizer", where="What a run looks like: the optimizer step line",
          figure=_readme(r"^(optimizer step .*)$", "## What a run looks like"), command=PLAN,
          measured=text(r"^(optimizer step .*)$")),
    Claim(id="readme-run-baselines", where="What a run looks like: the baselines table",
          figure=_readme(r"^(baseline\s+step s.*\n(?:\w+\s+[\d.]+\s+[\d.]+x.*\n)+)", "## What a run looks like"),
          command=PLAN, measured=text(r"^(baseline\s+step s.*\n(?:\w+\s+[\d.]+\s+[\d.]+x.*\n)+)")),
    Claim(id="readme-run-solver", where="What a run looks like: the solver line (without its wall time)",
          figure=_readme(r"^(solver .*) in [\d.]+ s$", "## What a run looks like"), command=PLAN,
          measured=text(r"^(solver .*) in [\d.]+ s$")),
    Claim(id="readme-run-solver-wall", where="What a run looks like: the solver line's wall time",
          figure=_readme(r"^solver .* in ([\d.]+) s$", "## What a run looks like"), command=PLAN,
          measured=lambda run: float(text(r"^solver .* in ([\d.]+) s$")(run)[0]), compare=WALL),
    Claim(id="readme-run-winner", where="What a run looks like: the winner line",
          figure=_readme(r"^(winner: .*)$", "## What a run looks like"), command=PLAN,
          measured=text(r"^(winner: .*)$")),
    Claim(id="readme-pairs-hidden", where="Post-overlap cost: the share MoE-beside-MoE and loss-head pairs hide",
          figure=_readme(r"MoE-beside-MoE\s+pairs hide (\d+)-(\d+)% of their serial time, pairs with the loss head "
                         r"(\d+)-(\d+)%", "### Post-overlap cost"),
          command=PROFILE_ANALYTICAL,
          measured=lambda run: (*_hidden(run.file_json("profile.json")["pairs"], lambda a, b: _moe(a) and _moe(b)),
                                *_hidden(run.file_json("profile.json")["pairs"], _with_head))),
    Claim(id="readme-default-plan-now", where="Headline figures, last paragraph: Qwen3-Next's default plan today",
          figure=_readme(r"Qwen3-Next [\d.]+ -> ([\d.]+) s predicted"), command=PLAN,
          measured=lambda run: float(text(r"^predicted step ([\d.]+) s")(run)[0])),
]

HEADLINE = [
    Claim(id="readme-partition", where="Headline figures: partition",
          figure=_readme(r"^\| partition \| .*?: ([\d.]+)x \(pp 8\), ([\d.]+)x \(pp 16\) at the shipped memory limit; "
                         r"([\d.]+)x, ([\d.]+)x with memory relaxed"),
          command=PARTITION, measured=_partition),
    Claim(id="readme-joint-gap", where="Headline figures: joint search, gap to the bound where 2p fits",
          figure=_readme(r"^\| joint search \| gap to the lower bound where memory allows 2p microbatches: ([\d.]+)% "
                         r"\(within the 3% target\) and ([\d.]+)%"),
          command=JOINT, measured=_joint_2p, stale=JOINT_STALE),
    Claim(id="readme-joint-le-c", where="Headline figures: joint search, not behind the serial partition planned alone",
          figure=_readme(r"^\| joint search \| .*never behind the serially balanced partition planned on its own "
                         r"\((\d+) of (\d+) rows\)"), command=JOINT, stale=JOINT_STALE,
          measured=lambda run: (sum(r["joint_le_c_planned"] for r in run.json()["rows"]), len(run.json()["rows"]))),
    Claim(id="readme-joint-wall", where="Headline figures: joint search, wall time per plan",
          figure=_readme(r"^\| joint search \| .*; ([\d.]+)-([\d.]+) s per plan"), command=JOINT, stale=JOINT_STALE,
          measured=lambda run: span([r["joint_wall_s"] for r in run.json()["rows"]]), compare=WALL),
    Claim(id="readme-schedule", where="Headline figures: schedule solver",
          figure=_readme(r"^\| schedule solver \| never slower than the best heuristic \((\d+/\d+)\); gaps "
                         r"([\d.]+)-([\d.]+)% to the bound"),
          command=SCHEDULE, measured=_schedule),
    Claim(id="readme-zb-steady-bubble", where="Headline figures: Zero Bubble setting, steady bubble",
          figure=_readme(r"^\| Zero Bubble setting \| steady bubble ([\d.]+)"), command=ZB_SETTING,
          measured=lambda run: run.json()["steady"]["steady_bubble"]),
    Claim(id="readme-zb-never-slower", where="Headline figures: Zero Bubble setting, makespan against the ZB heuristic",
          figure=_readme(r"^\| Zero Bubble setting \| .*never slower than the ZB heuristic on makespan \((\d+/\d+)\)"),
          command=VS_ZB,
          measured=lambda run: ratio_text(sum(r["not_slower_than_zb"] for r in run.json()["rows"]),
                                          len(run.json()["rows"]))),
    Claim(id="readme-simulator", where="Headline figures: simulator full pass (M actions/s, CPU time)",
          figure=_readme(r"^\| simulator \| full pass ([\d.]+)-([\d.]+) M actions/s"), command=SIMULATOR,
          measured=lambda run: run.json()["summary"]["full_actions_per_s"] / 1e6,
          compare=InRange(3.0, CPU_TIME.why)),
    Claim(id="readme-search-same-plan", where="Headline figures: search budget, the same plan idle and busy",
          figure=_readme(r"^\| search budget \| the same plan \(hash\) idle and beside two busy processes, "
                         r"(\d+) of (\d+) cases"),
          command=DETERMINISM, measured=lambda run: (run.json()["identical"], run.json()["cases"])),
    Claim(id="readme-search-cap-kept", where="Headline figures: search budget, the --time-limit cap at load",
          figure=_readme(r"^\| search budget \| .*the `--time-limit` cap kept in (\d+/\d+) cases"),
          command=BUDGET_QUICK,
          measured=lambda run: [r["wall_s"] / r["wall_limit_s"] for r in run.json()["rows"]], compare=CAP_KEPT),
    Claim(id="readme-zb-peer", where="Headline figures: Zero Bubble peer", command="python benchmarks/vs_zb.py "
          "--zb-dir /tmp/zb --json",
          figure=_readme(r"^\| Zero Bubble peer \| .*: ppplan equal or ahead on all (\d+)"),
          measured=lambda run: sum(r["ppplan_s"] <= r["peer_best_s"] * (1 + 1e-3)
                                   for r in run.json()["zero_bubble"] if not r.get("tuned_on")),
          stale=Stale(why="needs the peer's code (a copy of the Zero Bubble repository in /tmp/zb) and 12 min",
                      date=_date("docs/search-peers.md", r"`python benchmarks/vs_zb.py --zb-dir /tmp/zb --json` "
                                 r"re-run on (\d{4}-\d\d-\d\d)"))),
    Claim(id="readme-zb-first-plan", where="Headline figures: Zero Bubble peer, time to the first plan",
          command="python benchmarks/vs_zb.py --first-plan --zb-dir /tmp/zb --json",
          figure=_readme(r"^\| Zero Bubble peer \| .*first plan within 2x of the heuristic's CPU time on (\d+) of (\d+) "),
          stale=Stale(why="needs the peer's code (a copy of the Zero Bubble repository in /tmp/zb)",
                      date=_date("docs/search-peers.md", r"--first-plan --zb-dir /tmp/zb --json`, run on "
                                 r"(\d{4}-\d\d-\d\d)"))),
    Claim(id="readme-large-plans-actions", where="Headline figures: large plans, action count",
          figure=_readme(r"^\| large plans \| a ([\d,]+)-action plan"), command=PLAN_LOAD,
          measured=lambda run: run.json()["actions"]),
    Claim(id="readme-large-plans-cpu", where="Headline figures: large plans, load + validate CPU time",
          figure=_readme(r"^\| large plans \| .* loads and validates in ([\d.]+) CPU s"), command=PLAN_LOAD,
          measured=lambda run: run.json()["best_load_cpu_s"] + run.json()["best_validate_cpu_s"], compare=CPU_TIME),
    Claim(id="readme-targets", where="Headline figures: targets (predicted), Megatron's menu against the full search",
          figure=_readme(r"^\| targets \(predicted\) \| Megatron's menu ([\d.]+)-([\d.]+)x .*?at vpp 1 .*?, "
                         r"([\d.]+)-([\d.]+)x at vpp 2"),
          command=TARGETS, measured=_targets),
    Claim(id="readme-replan", where="Headline figures: re-planning", command=REPLAN,
          figure=_readme(r"^\| re-planning \| recovers (\d+%) of the gap in every hot case where layers move; "
                         r"Megatron's own logs give the (same) decisions"),
          measured=_replan),
    Claim(id="readme-profiler", where="Headline figures: measured profiler wall times", command=PROFILER,
          figure=_readme(r"^\| measured profiler \| Qwen3-Next at 1/16 width in ([\d.]+) s, DeepSeek-V3 at 1/32 "
                         r"width in ([\d.]+) s"),
          measured=lambda run: tuple(run.json()["models"][m]["wall_s"]
                                     for m in ("qwen3-next-80b-a3b", "deepseek-v3")), compare=WALL),
    Claim(id="readme-replay", where="Headline figures: replay", command="python benchmarks/replay.py --json --steps 10",
          figure=_readme(r"^\| replay \| calibrated within ([\d.]+)%"),
          stale=Stale(why="a 3-minute two-process replay whose errors compare two timings on a loaded machine",
                      date=_date("docs/replay.md", r"^\| 5\. a full backward .*? \| not recorded \(first recorded "
                                 r"(\d{4}-\d\d-\d\d)\)"))),
    Claim(id="readme-overlap-runtime", where="Headline figures: overlap runtime",
          command="python benchmarks/overlap.py --json --steps 20 --reps 9 --skip-real --work 2",
          figure=_readme(r"^\| overlap runtime \| hidden share within ([\d.]+) of the prediction"),
          stale=Stale(why="eight runs of 3-4 min each (emulated link, timed steps)",
                      date=_date("docs/overlap.md", r"commits 51641da, 4f89113, 9b79404 and 0eac8f6, all "
                                 r"(\d{4}-\d\d-\d\d)"))),
    Claim(id="readme-published", where="Headline figures: published runs", command="python benchmarks/published.py "
          "--fit --jobs 2 --json",
          figure=_readme(r"^\| published runs \| (\d+) runs .*median \\\|ln\(pred/meas\)\\\| ([\d.]+) over (\d+) "
                         r"planned rows \((\d+) refused\), ratios ([\d.]+-[\d.]+), (\d+) rows outside"),
          measured=_held_out_headline,
          stale=Stale(why="51 min of planning 101 rows three ways plus the held-out folds",
                      date=_date("docs/published-validation.md", r"^Run on (\d{4}-\d\d-\d\d) 23:15"))),
    Claim(id="readme-published-careful", where="Headline figures: published runs after this round's settings",
          command="python benchmarks/published.py --ways careful --no-held-out --jobs 2 --json",
          figure=_readme(r"no held-out fold, (\d{4}-\d\d-\d\d)\): (\d+) of (\d+) refused, median \\\|ln\\\| ([\d.]+), "
                         r"(\d+) rows outside"),
          stale=Stale(why="4-9 min of planning 101 rows",
                      date=_date("docs/published-validation.md", r"^Run on (\d{4}-\d\d-\d\d) 01:54"))),
    Claim(id="readme-published-misses", where="Which published runs miss: the seven rows outside 0.67-1.5, careful way",
          command="python benchmarks/published.py --ways careful --no-held-out --jobs 2 --json",
          figure=_readme(r"26\.02 H100 ([\d.]+), 25\.11 H100 ([\d.]+), 25\.11\s+B200 ([\d.]+);[\s\S]*?"
                         r"at CP 8 and 256k tokens \(([\d.]+):[\s\S]*?"
                         r"Llama3-70B at CP 2 \(([\d.]+):[\s\S]*?"
                         r"Megatron-FSDP \(([\d.]+);[\s\S]*?AutoModel Qwen3-30B-A3B \(([\d.]+);"),
          measured=lambda run: tuple(f"{by(run.json()['rows'], id=i)['careful']['ratio']:.2f}" for i in _MISSES),
          stale=Stale(why="4-9 min of planning 101 rows",
                      date=_date("docs/published-validation.md", r"^Run on (\d{4}-\d\d-\d\d) 01:54"))),
    Claim(id="readme-published-edge", where="Which published runs miss: the two memory-edge rows now inside, careful way",
          command="python benchmarks/published.py --ways careful --no-held-out --jobs 2 --json",
          figure=_readme(r"GB200 Llama 3\.1 405B \([\d.]+ -> ([\d.]+)\) and 26\.04 GB200 DeepSeek-V3 in MXFP8 "
                         r"\([\d.]+ -> ([\d.]+);"),
          measured=lambda run: tuple(f"{by(run.json()['rows'], id=i)['careful']['ratio']:.2f}" for i in _EDGE),
          stale=Stale(why="4-9 min of planning 101 rows",
                      date=_date("docs/published-validation.md", r"^Run on (\d{4}-\d\d-\d\d) 23:15"))),
    Claim(id="readme-degrees", where="Headline figures: degree search wall time", command=DEGREES,
          figure=_readme(r"^\| degree search \| DeepSeek-V3 on 1024 GPUs planned in ([\d.]+) s"),
          measured=lambda run: run.wall_s, compare=WALL),
    Claim(id="readme-gpu", where="Headline figures: GPU (one H200)",
          command="python benchmarks/gpu_check.py --out gpu_check_h200.json --budget-s 330",
          figure=_readme(r"^\| GPU \(one H200\) \| BF16 GEMMs at up to ([\d.]+) of peak"),
          stale=Stale(why="needs a GPU", date=_date("docs/gpu.md", r"^Measured on one H200 on (\d{4}-\d\d-\d\d)"))),
    Claim(id="readme-hostile", where="Headline figures: bad input, hand-made hostile inputs", command=HOSTILE,
          figure=_readme(r"^\| bad input \| (\d+) of (\d+) hand-made hostile inputs"),
          measured=lambda run: (sum(r["met_contract"] for r in run.file_json("hostile.json")),
                                sum(r["hostile"] for r in run.file_json("hostile.json")))),
    Claim(id="readme-fuzz", where="Headline figures: bad input, fuzzed inputs", command=FUZZ,
          figure=_readme(r"^\| bad input \| .* and (\d+) of (\d+) fuzzed inputs"),
          measured=lambda run: (sum(r["met_contract"] for r in run.file_json("fuzz.json")),
                                sum(r["fuzzed"] for r in run.file_json("fuzz.json")))),
    Claim(id="readme-exports", where="Headline figures: exports accepted by each framework's own loader",
          command=FRAMEWORKS,
          figure=_readme(r"^\| exports \| .*Megatron-Bridge (\d+/\d+), torchtitan main (\d+/\d+), 0\.3\.0 (\d+/\d+) "
                         r".*DeepSpeed (\d+/\d+), torch (\d+/\d+)"),
          measured=_frameworks),
    Claim(id="readme-exports-megatron-lm", where="Headline figures: exports, Megatron-LM's validate_args",
          command="python benchmarks/frameworks.py --json --work 3 --megatron-lm /tmp/mlm@core_v0.16.1",
          figure=_readme(r"^\| exports \| .*Megatron-LM (\d+/\d+)"),
          stale=Stale(why="needs Megatron-LM's source tree (megatron/training is in no wheel) in /tmp/mlm",
                      date=_date("docs/frameworks.md", r"^on (\d{4}-\d\d-\d\d) from 14:19:29"))),
    Claim(id="readme-overlap-tests", where="Headline figures: overlap tests against the mutants",
          command="python -m pytest -q -rf --timeout=600 tests/test_runtime_trace.py tests/test_runtime_overlap.py",
          figure=_readme(r"^\| overlap tests \| .*fails all (\d+) overlap tests"),
          stale=Stale(why="each mutant is applied to a copy of the tree by hand, 5 min of 2-process tests each",
                      date=_date("docs/runtime-checks.md", r"^(\d{4}-\d\d-\d\d), 13:45-14:20 UTC"))),
]

CLAIMS = RUN_BLOCK + HEADLINE
