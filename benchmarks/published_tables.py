"""The tables of docs/published-validation.md's "Figures" section, from one run's JSON.

The page's tables are what ``python benchmarks/published.py --fit --jobs 2 --json`` printed;
this turns that JSON into the page's Markdown, so a re-run changes the page by copying, not
by hand:

    python benchmarks/published.py --fit --jobs 2 --json > run.json
    python benchmarks/published_tables.py run.json [--section ways|families|spearman|memory|rows]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

WAY_ORDER = ("careful", "plain", "recipe", "held_out")
WITHIN = 0.10
"""A peak counts as within target when its ratio is within 10% of 1 (the validation's memory target)."""


def _med(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _range(s: dict) -> str:
    return "-" if s["ratio_min"] is None else f"{s['ratio_min']:.2f}-{s['ratio_max']:.2f}"


def ways(res: dict) -> list[str]:
    out = ["| way | median \\|ln(pred/meas)\\| | rows planned | refused | ratio range |", "|---|---|---|---|---|"]
    for way in (w for w in WAY_ORDER if w in res["summary"]):
        s = res["summary"][way]
        out.append(f"| {way} | {_med(s['median_abs_ln'])} | {s['planned']} | {s['refused']} | {_range(s)} |")
    return out


def families(res: dict) -> list[str]:
    names = list(next(iter(res["families"].values()))["constants"])
    out = ["| source family held out | rows planned | refused | median \\|ln\\| held out | ratio range | "
           + " | ".join(names) + " |", "|---" * (5 + len(names)) + "|"]
    for fam, f in sorted(res["families"].items()):
        consts = [f"{v * 1e3:.3f} ms" if n.endswith("_s") else f"{v:.4f}" for n, v in f["constants"].items()]
        out.append(f"| {fam} | {f['planned']} | {f['refused']} | {_med(f['median_abs_ln'])} | {_range(f)} | "
                   + " | ".join(consts) + " |")
    return out


def spearman(res: dict) -> list[str]:
    held = "held_out" in res["spearman"]
    out = ["| model | rows | planned | Spearman, shipped constants" + (" | Spearman, held out |" if held else " |"),
           "|---|---|---|---|" + ("---|" if held else "")]
    for model, sp in sorted(res["spearman"]["careful"].items()):
        cells = [sp["spearman"]] + ([res["spearman"]["held_out"][model]["spearman"]] if held else [])
        out.append(f"| {model} | {sp['rows']} | {sp['planned']} | "
                   + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
    return out


def memory(res: dict) -> list[str]:
    within = sum(1 for m in res["memory"] if m["ratio"] is not None and abs(m["ratio"] - 1) <= WITHIN)
    out = [f"{within} of {len(res['memory'])} within {WITHIN:.0%}:", "",
           "| row | what it measures | rank | published GiB | predicted GiB | ratio |", "|---|---|---|---|---|---|"]
    for m in res["memory"]:
        pred = "refused" if m["predicted_gib"] is None else f"{m['predicted_gib']}"
        ratio = "-" if m["ratio"] is None else f"{m['ratio']:.2f}"
        out.append(f"| {m['id']} | {m['measure']} | {m['rank']} | {m['measured_gib']} | {pred} | {ratio} |")
    return out


def _cell(got: dict) -> str:
    return "refused" if "ratio" not in got else f"{got['ratio']:.2f}"


def rows(res: dict) -> list[str]:
    shown = [w for w in ("careful", "held_out", "plain", "recipe") if w in res["rows"][0]]
    out = ["| row | family | GPUs | published tok/s/GPU | " + " | ".join(w.replace("_", " ") for w in shown) + " |",
           "|---" * (4 + len(shown)) + "|"]
    for r in res["rows"]:
        out.append(f"| {r['id']} | {r['family']} | {r['num_gpus']} {r['gpu']} | {r['measured']:g} | "
                   + " | ".join(_cell(r[w]) for w in shown) + " |")
    return out


TABLES = {"ways": ways, "families": families, "spearman": spearman, "memory": memory, "rows": rows}
"""Each section's table, by the name ``--section`` takes."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="the JSON of published.py --json (with --fit for the held-out tables)")
    ap.add_argument("--section", choices=tuple(TABLES), action="append", help="the tables to print (default: all)")
    args = ap.parse_args()
    try:
        res = json.loads(args.run.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        print(f"run: cannot read {args.run} as published.py's JSON ({exc}); pass the file --json wrote",
              file=sys.stderr)
        sys.exit(2)
    for name in args.section or TABLES:
        if name == "families" and "families" not in res:
            continue
        sys.stdout.write(f"<!-- {name} -->\n" + "\n".join(TABLES[name](res)) + "\n\n")


if __name__ == "__main__":
    main()
