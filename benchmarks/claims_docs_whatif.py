"""Claims of docs/published-validation.md's "Which constant moves which row": each missing row's
ratio under each change of ``benchmarks/published_whatif.py``, re-derived by that benchmark on
those rows, and the all-row summary per change (stale: 404 plans)."""

from __future__ import annotations

import re

from claim_kit import Claim, Page, Stale
from claim_outputs import by

__all__ = ["CLAIMS", "WHATIF_ROWS"]

_PAGE = "docs/published-validation.md"
_SECTION = "## Which constant moves which row"
WHATIF_ROWS = ("automodel-20251008-h100-qwen3-30b-a3b-8gpu", "modelzoo-20250527-h100-qwen3-235b-a22b-tp2ep8-fsdp",
               "mb-26.04-gb200-deepseek-v3-mxfp8-256gpu", "mb-25.11-gb200-llama31-405b-fp8cs-256gpu",
               "automodel-20260410-h100-llama3-70b-64gpu-cp2", "mb-25.11-qwen3-30b-a3b",
               "mb-26.02-h100-qwen3-30b-a3b-fp8-16gpu", "mb-25.11-b200-qwen3-30b-a3b-fp8mx-8gpu",
               "torchtitan-2024-12-h100-hbm2e-llama3-8b-8gpu-fsdp1-cp8-seq256k-float8")
"""The rows the README names as outside 0.67-1.5 (careful way), too slow first."""
_CHANGES = ("shipped", "a2a-nvlink4", "gemm-measured", "both", "no-a2a")
WHATIF = f"python benchmarks/published_whatif.py --rows {','.join(WHATIF_ROWS)} --jobs 2 --json"
"""The command the section documents for its table."""
ALL_ROWS = "python benchmarks/published_whatif.py --jobs 2 --json"


def _ratios(run, row_id: str) -> tuple[str, ...]:
    e = by(run.json()["rows"], id=row_id)
    return tuple("refused" if "refused" in e[c] else f"{e[c]['ratio']:.2f}" for c in _CHANGES)


CLAIMS = [Claim(id=f"published-whatif-{i:02d}", where=f"which constant moves which row: {row_id}", command=WHATIF,
                figure=Page(path=_PAGE, section=_SECTION,
                            pattern=rf"^\|\s*{re.escape(row_id)}\s*\|[^|\n]*\|" + r"([^|\n]*)\|" * len(_CHANGES) + "$"),
                measured=lambda run, r=row_id: _ratios(run, r))
          for i, row_id in enumerate(WHATIF_ROWS)]

CLAIMS.append(Claim(
    id="published-whatif-all", where="which constant moves which row: every row, median and rows outside per change",
    command=ALL_ROWS,
    figure=Page(path=_PAGE, section=_SECTION,
                pattern=r"\n".join(rf"^\| `{c}` \| ([\d.]+) \| (\d+) \| (\d+) \|" for c in _CHANGES)),
    measured=lambda run: tuple(x for c in _CHANGES for x in (
        f"{run.json()['summary'][c]['median_abs_ln']:.3f}", run.json()["summary"][c]["outside"],
        run.json()["summary"][c]["refused"])),
    stale=Stale(why="404 plans, about 16 min on two cores",
                date=Page(path=_PAGE, section=_SECTION, pattern=r"^Every row \(([\d-]+),"))))

_DS26 = ("ppplan plan deepseek-v3 --cluster benchmarks/data/clusters/mb-26.04-gb200-deepseek-v3-mxfp8-256gpu.yaml "
         "--target megatron --out plan.json")


def _ds26(run) -> tuple[str, ...]:
    plan = run.file_json("plan.json")
    base, pred = plan["baselines"], plan["predicted"]
    peak = lambda name: f"{max(base[name]['peak_memory_bytes']) / 2**30:.1f}"  # noqa: E731
    return (peak("uniform"), peak("serial_balanced"), f"{pred['memory_limit_bytes'] / 2**30:.1f}",
            f"{pred['bubble_fraction']:.1%}", f"{pred['step_time_s']:.2f}", f"{base['serial_balanced']['step_time_s']:.2f}")


CLAIMS.append(Claim(
    id="published-whatif-ds26-memory", where="which constant moves which row: the 26.04 GB200 DeepSeek-V3 plan's memory",
    command=_DS26,
    figure=Page(path=_PAGE, section=_SECTION,
                pattern=r"even partition at ([\d.]+) GiB[\s\S]*?serially balanced one at ([\d.]+) GiB[\s\S]*?"
                        r"fits the ([\d.]+) GiB limit is uneven and idles ([\d.]+%) of the step \(predicted ([\d.]+) s;"
                        r"[\s\S]*?schedule takes ([\d.]+) s"),
    measured=_ds26))

_GEMMS = ("python -c \"from profiler.cost_model.gemm import gemm_efficiency as e; "
          "from profiler.cost_model.fitted import FITTED as f; print(e(8192, 768, 2048, f), e(4096, 1536, 4096, f))\"")
CLAIMS.append(Claim(
    id="published-whatif-expert-gemms", where="which constant moves which row: the pp-1 rows' expert GEMM efficiency",
    command=_GEMMS,
    figure=Page(path=_PAGE, section=_SECTION, pattern=r"runs their expert GEMMs at ([\d.]+) and ([\d.]+) of peak"),
    measured=lambda run: tuple(f"{float(x):.2f}" for x in run.stdout.split())))

_README_ROWS = ("modelzoo-20250527-h100-qwen3-235b-a22b-tp2ep8-fsdp", "automodel-20251008-h100-qwen3-30b-a3b-8gpu")


def _readme_pp1(run) -> tuple[str, ...]:
    rows = run.json()["rows"]
    free = tuple(f"{by(rows, id=i)['no-a2a']['ratio']:.2f}" for i in _README_ROWS)
    return free + tuple(f"{by(rows, id=i)['a2a-nvlink4']['ratio']:.2f}" for i in _README_ROWS)


CLAIMS.append(Claim(
    id="readme-whatif-pp1", where="README misses: the two pp-1 rows with the all-to-all free and at 337 GB/s",
    command=WHATIF,
    figure=Page(path="README.md", section="## Headline figures",
                pattern=r"Megatron-FSDP \([\d.]+; ([\d.]+) with every all-to-all free\)[\s\S]*?"
                        r"AutoModel Qwen3-30B-A3B \([\d.]+; ([\d.]+) with them free\)[\s\S]*?"
                        r"on an H20: ([\d.]+) and ([\d.]+);"),
    measured=_readme_pp1))
CLAIMS.append(Claim(
    id="readme-whatif-ds26", where="README misses: the 26.04 GB200 DeepSeek-V3 plan's even partition and bubble",
    command=_DS26,
    figure=Page(path="README.md", section="## Headline figures",
                pattern=r"puts its even partition at ([\d.]+) GiB[\s\S]*?fits idles ([\d.]+%) of the step"),
    measured=lambda run: tuple(_ds26(run)[i] for i in (0, 3))))

_REFIT = "python benchmarks/published.py --fit --jobs 2 --json --change a2a-nvlink4"


def _refit(run) -> tuple:
    res = run.json()
    ho = res["summary"]["held_out"]
    sp = res["spearman"]["held_out"]
    return (f"{ho['median_abs_ln']:.3f}", ho["planned"], ho["outside"], f"{sp['qwen3-30b-a3b']['spearman']:.2f}",
            f"{sp['deepseek-v3']['spearman']:.2f}")


CLAIMS.append(Claim(
    id="published-whatif-refit", where="which constant moves which row: the refit with the all-to-all at 337 GB/s",
    command=_REFIT,
    figure=Page(path=_PAGE, section=_SECTION,
                pattern=r"held-out\nmedian \|ln\| ([\d.]+) over (\d+) planned rows \(0\.124 over 101 with the preset\), "
                        r"(\d+) rows outside\n0\.67-1\.5 \(8\), within-model Spearman ([\d.]+) for Qwen3-30B-A3B "
                        r"\(0\.63\) and ([\d.]+) for DeepSeek-V3"),
    measured=_refit,
    stale=Stale(why="23 min of planning and refitting 101 rows",
                date=Page(path=_PAGE, section=_SECTION, pattern=r"--change a2a-nvlink4`, run on (\d{4}-\d\d-\d\d) 06:56"))))
CLAIMS.append(Claim(
    id="limits-whatif-refit", where="docs/limits.md: the refit with the all-to-all at 337 GB/s",
    command=_REFIT,
    figure=Page(path="docs/limits.md", pattern=r"NVLink: held out ([\d.]+), (\d+) rows outside, one refused"),
    measured=lambda run: (_refit(run)[0], _refit(run)[2]),
    stale=Stale(why="23 min of planning and refitting 101 rows",
                date=Page(path=_PAGE, section=_SECTION, pattern=r"--change a2a-nvlink4`, run on (\d{4}-\d\d-\d\d) 06:56"))))
