"""The commands the pages document, and how to read figures from their output.

Each command string is written here once; a claim on any page that quotes the same
command shares its run. Readers take a ``claim_kit.Run`` and return plain values (one
per documented cell).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from claim_kit import Claim, Page, Ratio, Stale, Targets

__all__ = [
    "DETERMINISM", "DEGREES", "FRAMEWORKS", "FUZZ", "HOSTILE", "JOINT", "PARTITION", "PLAN", "PLAN_JSON",
    "PLAN_LOAD", "PROFILE_ANALYTICAL", "PROFILER", "REPLAN", "ELASTIC", "ELASTIC_8192", "SCHEDULE", "SIMULATOR", "BUDGET_QUICK",
    "TARGETS", "VS_ZB", "ZB_SETTING", "by", "joint_row", "partition_row", "schedule_row", "text", "span",
    "ratio_text", "pct", "ms", "CAP_KEPT", "WALL", "CPU_TIME", "JOINT_STALE", "history", "minutes",
    "published_rows", "published_row_claims",
]

WALL = Ratio(4.0, "wall clock: CI runs on a 2-core machine of unknown speed and load; beside other sessions' "
                  "jobs here (load 4-8 on 2 cores) one run took up to 3.6x its idle figure", floor=0.5)
CAP_KEPT = Targets(1.25, "the wall cap at an unknown load: a case counts as kept up to 25% over its cap")
CPU_TIME = Ratio(4.0, "CPU time: load matters less than for wall time, but the machines of this kind differ: the "
                      "same command at the same commit took 3x the CPU of one session's machine on another's, and "
                      "2x between two runs on one machine an hour apart (docs/search-peers.md's first-plan table)")

PLAN = "ppplan plan"
PLAN_JSON = "ppplan plan --json"
PARTITION = "python benchmarks/partition.py --json"
JOINT = "python benchmarks/joint.py --json"
SCHEDULE = "python benchmarks/schedule.py --json"
VS_ZB = "python benchmarks/schedule.py --vs-zb --json"
ZB_SETTING = "python benchmarks/schedule.py --zb-setting --json"
SIMULATOR = "python benchmarks/simulator.py --json --clock cpu"
DETERMINISM = "python benchmarks/determinism.py --json --busy 2"
BUDGET_QUICK = "python benchmarks/budget.py --quick --json"
PLAN_LOAD = "python benchmarks/plan_load.py --json"
TARGETS = "python benchmarks/targets.py --json --work 2"
DEGREES = "ppplan plan deepseek-v3 --gpus 1024"
PROFILER = "python benchmarks/measured_profile.py --json"
PROFILE_ANALYTICAL = "ppplan profile qwen3-next-80b-a3b --analytical"
REPLAN = "python benchmarks/replan.py --json"
ELASTIC = "python benchmarks/elastic.py --json"
ELASTIC_8192 = "python benchmarks/elastic.py --only deepseek-v3-8192-lose1,deepseek-v3-8192-node --json"
FRAMEWORKS = "python benchmarks/frameworks.py --json --work 3"
HOSTILE = "PPPLAN_HOSTILE_REPORT=hostile.json python -m pytest -q tests/test_hostile_inputs.py"
FUZZ = "PPPLAN_FUZZ_REPORT=fuzz.json python -m pytest -q tests/test_fuzz_inputs.py"


JOINT_STALE = Stale(why="about 5 min on an idle 2-core machine (10 min beside other jobs at load 2-5), over "
                         "CI's 12-minute budget for every claim; `--run-stale` re-derives it",
                    date=Page(path="docs/joint.md", section="## Joint plan vs fixed choices",
                              pattern=r"^(\d{4}-\d\d-\d\d) \d\d:\d\d-\d\d:\d\d UTC"))
"""The joint benchmark's claims: re-derivable, but left out of CI for its time."""


def minutes(cells: tuple[str, ...]) -> tuple[str, ...]:
    """``('1 min 32 s',)`` -> ``('92',)``: a wall time the page writes in minutes."""
    m = re.fullmatch(r"(?:(\d+) min )?(\d+) s", cells[0])
    if m is None:
        raise ValueError(f"not a duration: {cells[0]!r}")
    return (str(60 * int(m.group(1) or 0) + int(m.group(2))),)


def history(id: str, path: str, where: str, section: str, date: str, *, command: str = "",
            why: str = "history: made by an earlier version of the code, as the page says; today's command "
                       "gives the figures registered beside it") -> Claim:
    """A stale claim for a section the page keeps for the record: its date is its figure."""
    page = Page(path=path, pattern=date, section=section)
    return Claim(id=id, where=where, figure=page, command=command or "(no command: see the page)",
                 stale=Stale(why=why, date=page))


def by(rows: list[dict], **keys: Any) -> dict:
    """The one row whose fields equal ``keys``."""
    found = [r for r in rows if all(r.get(k) == v for k, v in keys.items())]
    if len(found) != 1:
        raise LookupError(f"{len(found)} rows match {keys}")
    return found[0]


def text(pattern: str) -> Callable[[Any], tuple[str, ...]]:
    """Reader: the capture groups of ``pattern`` (must match once) in the command's stdout."""
    def read(run: Any) -> tuple[str, ...]:
        found = list(re.finditer(pattern, run.stdout, re.MULTILINE))
        if len(found) != 1:
            raise LookupError(f"stdout: pattern {pattern!r} matched {len(found)} times")
        return tuple(g.strip() for g in found[0].groups())
    return read


def span(values: list[float]) -> tuple[float, float]:
    """(smallest, largest)."""
    return min(values), max(values)


def pct(x: float | None) -> float | None:
    """A fraction as per cent."""
    return None if x is None else 100.0 * x


def ms(x: float | None) -> float | None:
    """Seconds as milliseconds."""
    return None if x is None else 1000.0 * x


def ratio_text(num: int, den: int) -> str:
    """``num/den`` as the pages write counts."""
    return f"{num}/{den}"


def partition_row(run: Any, model: str, pp: int, vpp: int, memory: str) -> dict:
    """One row of ``benchmarks/partition.py``."""
    return by(run.json()["rows"], model=model, pp=pp, vpp=vpp, memory=memory)


def joint_row(run: Any, model: str, pp: int, vpp: int, gpu: str) -> dict:
    """One row of ``benchmarks/joint.py``."""
    return by(run.json()["rows"], model=model, pp=pp, vpp=vpp, gpu=gpu)


def schedule_row(run: Any, stages: int, m: int, mem: int, costs: str) -> dict:
    """One row of ``benchmarks/schedule.py`` (and of ``--vs-zb``)."""
    return by(run.json()["rows"], stages=stages, microbatches=m, memory_microbatches=mem, costs=costs)


_PUBLISHED_PAGE = "docs/published-validation.md"


def published_rows(ids: list[str], jobs: int = 1) -> str:
    """The documented command that re-plans published rows ``ids`` with their careful cluster
    files and the shipped constants (no held-out fold)."""
    return (f"python benchmarks/published.py --rows {','.join(ids)} --ways careful --no-held-out"
            f"{f' --jobs {jobs}' if jobs != 1 else ''} --json")


def _published_cells(run: Any, row_id: str) -> tuple[str, str, str]:
    """Predicted optimizer step, peak and predicted / published ratio of ``row_id``."""
    got = next(r for r in run.json()["rows"] if r["id"] == row_id)["careful"]
    return got["optimizer_step"], got["peak_gib"], f"{got['ratio']:.2f}"


def published_row_claims(ids: list[str], *, section: str, prefix: str, where: str, jobs: int = 1,
                         command: str | None = None) -> list[Claim]:
    """One claim per row of a docs/published-validation.md ``section`` table whose last three
    cells are the row's predicted step, peak and ratio (three cells before them: what the run
    set, the earlier figure, the published step), re-derived by ``published_rows``."""
    cmd = command or published_rows(ids, jobs)
    return [Claim(id=f"{prefix}-{i:02d}", where=f"{where}: {row_id}", command=cmd,
                  figure=Page(path=_PUBLISHED_PAGE, section=section,
                              pattern=rf"^\|\s*{re.escape(row_id)}\s*\|(?:[^|\n]*\|){{3}}([^|\n]*)\|([^|\n]*)\|"
                                      rf"([^|\n]*)\|$"),
                  measured=lambda run, r=row_id: _published_cells(run, r))
            for i, row_id in enumerate(ids)]
