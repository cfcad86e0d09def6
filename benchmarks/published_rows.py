"""Published training runs: the row files, their source families and their memory figures.

Throughput rows come from ``benchmarks/data/published_runs.json`` (the first eight, on which
the shipped constants were first fitted) and every ``benchmarks/data/published/*.json``
(collected later, one file per group of sources). Each row cites its page and table, names
the cluster file a user would write for it (``cluster``, under ``benchmarks/data/``), the
``--target`` it is planned with, the framework recipe a plain file gets
(``cluster_recipe``) and its source ``family`` (a framework release series or a report:
the unit the leave-one-source-out validation holds out).

A row that publishes its peak memory has ``measured_peak_gib`` and ``memory_measure``: what
the figure is (``max_memory_allocated``: live tensors; ``max_memory_reserved``: what the
caching allocator holds, torchtitan's logged figure). ``published_runs.json``'s
``memory_rows`` are memory-only rows (no throughput).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["DATA", "load_rows", "load_memory_only_rows", "row_family", "MEASURES"]

DATA = Path(__file__).resolve().parent / "data"
FIRST = DATA / "published_runs.json"
MORE = DATA / "published"
MEASURES = ("max_memory_allocated", "max_memory_reserved")
"""The memory quantities a row may publish (``torch.cuda`` names)."""


def _files() -> list[Path]:
    return [FIRST, *sorted(MORE.glob("*.json"))]


def load_rows() -> list[dict]:
    """Every throughput row, in file order; memory a file adds for another file's row
    (``memory_for_existing_rows``) is merged into that row."""
    rows: list[dict] = []
    extra: dict[str, dict] = {}
    for path in _files():
        data = json.loads(path.read_text())
        for row in data.get("rows", []):
            rows.append({**row, "row_file": path.relative_to(DATA).as_posix()})
        for mem in data.get("memory_for_existing_rows", []):
            extra[mem["id"]] = {k: v for k, v in mem.items() if k != "id"}
    ids = [r["id"] for r in rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"published rows: duplicate ids {dup}")
    unknown = sorted(set(extra) - set(ids))
    if unknown:
        raise ValueError(f"published rows: memory given for unknown rows {unknown}")
    return [{**r, **extra.get(r["id"], {})} for r in rows]


def load_memory_only_rows() -> list[dict]:
    """Rows that publish a peak and no throughput (``memory_rows``), normalised to
    ``measured_peak_gib`` / ``memory_measure``."""
    out = []
    for row in json.loads(FIRST.read_text()).get("memory_rows", []):
        out.append({**row, "measured_peak_gib": row["measured_peak_allocated_gib"],
                    "memory_measure": "max_memory_allocated", "row_file": FIRST.name})
    return out


def row_family(row: dict) -> str:
    """The row's source family (leave-one-source-out unit)."""
    return str(row["family"])
