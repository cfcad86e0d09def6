"""Claims of docs/hetero.md: mixed GPU fleets (``benchmarks/hetero.py``)."""

from __future__ import annotations

from claim_kit import Claim, Page, Ratio, column_pattern, row_pattern
from claim_outputs import CPU_TIME, WALL, by, history

__all__ = ["CLAIMS", "HETERO", "CASES", "row_cells", "order_cells"]

HETERO = "python benchmarks/hetero.py --json"
VS_SAILOR = ("python benchmarks/vs_sailor.py --sailor-dir /tmp/sailor --sailor-python /tmp/sailor-venv/bin/python "
             "--libplanner /tmp/sailor-lib --sailor-timeout 420 --json")
CASES = ("llama3-8b/h100+a100", "llama3-8b/a100-80g+a100-40g", "qwen3-30b-a3b/h100+a100",
         "qwen3-30b-a3b/a100-80g+a100-40g", "qwen3-235b-a22b/h100+a100")
_PAGE = "docs/hetero.md"
_TABLE = "## Mixed plan vs the faster group alone and an even layout"


def _layers(r: dict) -> str:
    """``13, 14 h100 / 4, 3 a100``: layers per stage, grouped by device."""
    runs: list[tuple[str, list[int]]] = []
    for dev, n in zip(r["stage_devices"], r["stage_layers"]):
        if runs and runs[-1][0] == dev:
            runs[-1][1].append(n)
        else:
            runs.append((dev, [n]))
    return " / ".join(f"{', '.join(map(str, ns))} {dev}" for dev, ns in runs)


def row_cells(r: dict) -> tuple:
    """The table's measured cells of one row, in page order (the wall column apart)."""
    a = r["alone"]
    return (f"{r['pp']} x {r['dp']}", _layers(r), r["step_s"], r["uniform_step_s"], r["uniform_fits"],
            f"{a['gpus']} {a['gpu']}: pp {a['pp']} tp {a['tp']} dp {a['dp']}", a["optimizer_step_s"],
            r["optimizer_step_s"], r["vs_alone"], max(p / c for p, c in zip(r["peak_gib"], r["limit_gib"])))


def order_cells(r: dict) -> tuple:
    """The group-order table's measured cells of one row: each order and its step, the kept one."""
    given, other = r["orders"]
    kept = min((given, other), key=lambda o: o["step_time_s"])["devices"]
    return given["devices"], given["step_time_s"], other["devices"], other["step_time_s"], kept


def _rows(run) -> list[dict]:
    return [by(run.json()["rows"], case=c) for c in CASES]


def _holds(run) -> tuple[str, str, str]:
    rows = _rows(run)
    n = len(rows)
    return (f"{sum(r['fits'] for r in rows)} of {n}", f"{sum(r['vs_alone'] <= 1 for r in rows)} of {n}",
            f"{sum(r['vs_uniform'] <= 1 for r in rows)} of {n}")


CLAIMS = [
    Claim(id=f"hetero-{c.replace('/', '-')}", where=f"mixed-fleet table, {c}", command=HETERO,
          figure=Page(path=_PAGE, section=_TABLE, pattern=row_pattern(c, cells=10)),
          measured=lambda run, c=c: row_cells(by(run.json()["rows"], case=c)))
    for c in CASES] + [
    *[Claim(id=f"hetero-order-{c.replace('/', '-')}", where=f"group-order table, {c}", command=HETERO,
            figure=Page(path=_PAGE, section="## Group order", pattern=row_pattern(c, cells=5)),
            measured=lambda run, c=c: order_cells(by(run.json()["rows"], case=c)))
      for c in CASES],
    Claim(id="hetero-wall", where="mixed-fleet table, the plan wall s column (in total)", command=HETERO,
          figure=Page(path=_PAGE, section=_TABLE, pattern=column_pattern([(c,) for c in CASES], skip=10)),
          measured=lambda run: tuple(r["plan_wall_s"] for r in _rows(run)),
          compare=Ratio(WALL.factor, WALL.why, floor=WALL.floor, total=True)),
    Claim(id="hetero-cpu", where="mixed-fleet table, the plan CPU s column (in total)", command=HETERO,
          figure=Page(path=_PAGE, section=_TABLE, pattern=column_pattern([(c,) for c in CASES], skip=11)),
          measured=lambda run: tuple(r["plan_cpu_s"] for r in _rows(run)),
          compare=Ratio(CPU_TIME.factor, CPU_TIME.why, total=True)),
    Claim(id="hetero-holds", where="the targets sentence under the table", command=HETERO,
          figure=Page(path=_PAGE, section=_TABLE, pattern=r"within every group's memory in (\d+ of \d+) cases, "
                      r"never slower than the faster group alone in (\d+ of \d+) and never slower than the "
                      r"uniform layout in (\d+ of \d+)"),
          measured=_holds),
    history("hetero-vs-sailor", _PAGE, "every figure of the side by side with Sailor on its mixed A100/V100 "
            "setting", "## Side by side with Sailor", r"run on (\d{4}-\d\d-\d\d) \d\d:\d\d-\d\d:\d\d UTC",
            command=VS_SAILOR,
            why="needs Sailor's code (eth-easl/sailor, its libplanner built) and a venv of its dependencies, "
                "absent in CI, and about 15 min"),
]
