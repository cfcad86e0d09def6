"""Claims of docs/layout.md: your own layout (``ppplan plan --layout``) against ppplan's plan."""

from __future__ import annotations

import re

from claim_kit import Claim, Page, row_pattern
from claim_outputs import text

__all__ = ["CLAIMS"]

_LY = "docs/layout.md"
_TABLE = "## Your layout against ppplan's"
ROWS = (  # (model, pp, vpp, the layout cell as the page writes it, the layout as the command passes it)
    ("llama3-8b", 4, 1, "`8,8,8,8` (even)", "8,8,8,8"),
    ("qwen3-30b-a3b", 4, 1, "`12,12,12,12` (even)", "12,12,12,12"),
    ("deepseek-v3", 16, 2, "`Et\\|(tt\\|)*30mL` (Megatron-Bridge recipe)", "'Et|(tt|)*30mL'"),
)


def command(model: str, layout: str) -> str:
    """The page's command for one row (it prints the summary and writes plan.json)."""
    return f"ppplan plan {model} --layout {layout}"


def _gib(peaks: list[int]) -> float:
    return max(peaks) / 2**30


def _row(run) -> tuple:
    """(pp, vpp, your step, your peak GiB, ppplan's step, ppplan's peak GiB, ratio) of the plan printed."""
    plan = run.file_json("plan.json")
    mine, pred = plan["baselines"]["user_layout"], plan["predicted"]
    return (plan["parallel"]["pp"], plan["parallel"]["vpp"], mine["step_time_s"], _gib(mine["peak_memory_bytes"]),
            pred["step_time_s"], _gib(pred["peak_memory_bytes"]), mine["plan_speedup"])


def _bubbles(run) -> tuple:
    plan = run.file_json("plan.json")
    return 100 * plan["baselines"]["user_layout"]["bubble_fraction"], 100 * plan["predicted"]["bubble_fraction"]


def _layers(run) -> tuple:
    return tuple(b - a for a, b in (s["layers"] for s in run.file_json("plan.json")["stages"]))


_CMD = {model: command(model, layout) for model, _, _, _, layout in ROWS}

CLAIMS = [
    Claim(id=f"layout-table-{model}", where=f"your layout against ppplan's, {model}: pp, vpp, steps, peaks, ratio",
          command=_CMD[model],
          figure=Page(path=_LY, section=_TABLE, pattern=row_pattern(model, then=r"([^|\n]*)\|([^|\n]*)\|"
                                                                    + r"\s*" + re.escape(cell) + r"\s*\|" + r"([^|\n]*)\|" * 5)),
          measured=_row)
    for model, _, _, cell, _ in ROWS] + [
    Claim(id="layout-bubbles-even", where="where the time goes: the even splits' bubbles and ppplan's",
          command=_CMD["llama3-8b"],
          figure=Page(path=_LY, section=_TABLE, pattern=r"so their bubble is ([\d.]+)% and [\d.]+% against "
                      r"ppplan's ([\d.]+)% and"),
          measured=_bubbles),
    Claim(id="layout-bubbles-even-qwen", where="where the time goes: Qwen3-30B-A3B's even split and ppplan's",
          command=_CMD["qwen3-30b-a3b"],
          figure=Page(path=_LY, section=_TABLE, pattern=r"so their bubble is [\d.]+% and ([\d.]+)% against "
                      r"ppplan's [\d.]+% and\n([\d.]+)%"),
          measured=_bubbles),
    Claim(id="layout-stages-llama", where="where the time goes: ppplan's stage sizes on Llama 3 8B",
          command=_CMD["llama3-8b"],
          figure=Page(path=_LY, section=_TABLE, pattern=r"ppplan's stages hold (\d+), (\d+), (\d+), (\d+) and"),
          measured=_layers),
    Claim(id="layout-stages-qwen", where="where the time goes: ppplan's stage sizes on Qwen3-30B-A3B",
          command=_CMD["qwen3-30b-a3b"],
          figure=Page(path=_LY, section=_TABLE, pattern=r"ppplan's stages hold \d+, \d+, \d+, \d+ and (\d+), (\d+), "
                      r"(\d+), (\d+) layers"),
          measured=_layers),
    Claim(id="layout-deepseek-v3", where="where the time goes: DeepSeek-V3's first stage and bubbles",
          command=_CMD["deepseek-v3"],
          figure=Page(path=_LY, section=_TABLE, pattern=r"plan gives its first stage (\d+) layers[\s\S]*?"
                      r"bubble ([\d.]+)% against ([\d.]+)%\."),
          measured=lambda run: (_layers(run)[0], *_bubbles(run))),
    Claim(id="layout-summary-line", where="the summary's comparison line, Llama 3 8B with 8,8,8,8",
          command=_CMD["llama3-8b"],
          figure=Page(path=_LY, pattern=r"`your layout: ([\d.]+) s; ppplan's: ([\d.]+) s \(([\d.]+)x: yours is slower\)`"),
          measured=text(r"^your layout: ([\d.]+) s; ppplan's: ([\d.]+) s \(([\d.]+)x: yours is slower\)$")),
]

