"""What a claim is: a figure a page states, the command that re-derives it, how to read
the figure from the page and from the command's output, and how to compare the two.

The registry (``claims_readme.py``, ``claims_docs*.py``) is made of these records; the
runner (``claims.py``) runs each distinct command once and judges every claim on it.
The documented value is always read from the page text, never copied into the
registry: editing the page changes the documented value, and a page that loses the
figure raises ``FigureLost``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["Claim", "Exact", "FigureLost", "InRange", "Page", "Ratio", "Run", "Stale", "Targets", "cells",
           "column_pattern", "row_pattern"]

ROOT = Path(__file__).resolve().parents[1]


class FigureLost(LookupError):
    """The page no longer holds the figure where its claim looks for it."""


@dataclass(frozen=True, kw_only=True)
class Page:
    """Where a figure sits on a page: a regex with capture groups, applied to the text of one
    section (from the heading that starts with ``section`` to the next heading; the whole
    page when empty). It must match exactly once."""

    path: str
    """Repository path of the page, e.g. ``docs/partition.md``."""
    pattern: str
    """Regular expression (``re.MULTILINE``); each capture group is one documented cell."""
    section: str = ""
    """Start of the heading line of the section to search (``## Speed``), or '' for all."""
    combine: Callable[[tuple[str, ...]], tuple[str, ...]] | None = None
    """Turns the captured cells into the documented ones (``1 min 32 s`` -> ``92``)."""

    def read(self, root: Path = ROOT) -> tuple[str, ...]:
        """The documented cells (stripped) from the page as it is on disk."""
        text = section_text((root / self.path).read_text(encoding="utf-8"), self.section, self.path)
        found = list(re.finditer(self.pattern, text, re.MULTILINE))
        if len(found) != 1:
            where = f"{self.path}" + (f" section {self.section!r}" if self.section else "")
            raise FigureLost(f"{where}: pattern {self.pattern!r} matched {len(found)} times (expected once)")
        cells = tuple((g or "").strip() for g in found[0].groups())
        return self.combine(cells) if self.combine else cells


def section_text(text: str, heading: str, path: str = "") -> str:
    """The lines of ``text`` from the heading line that starts with ``heading`` up to the next
    heading line of any level (all of ``text`` when ``heading`` is '')."""
    if not heading:
        return text
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(heading)]
    if len(starts) != 1:
        raise FigureLost(f"{path}: heading {heading!r} found {len(starts)} times (expected once)")
    end = next((j for j in range(starts[0] + 1, len(lines)) if lines[j].startswith("#")), len(lines))
    return "".join(lines[starts[0]:end])


def row_pattern(*keys: str, cells: int = 0, then: str = "") -> str:
    """A Markdown table row whose first cells are ``keys`` (literal), capturing the next
    ``cells`` cells, then matching ``then``."""
    head = "".join(rf"\|\s*{re.escape(k)}\s*" for k in keys)
    return "^" + head + r"\|" + r"([^|\n]*)\|" * cells + then


def column_pattern(rows: list[tuple[str, ...]], skip: int) -> str:
    """Consecutive table rows starting with each key tuple of ``rows``, capturing in each the
    cell after the keys and ``skip`` more cells (a column of a table, one group per row)."""
    return r"\n".join(row_pattern(*keys, cells=0, then=r"(?:[^|\n]*\|)" + f"{{{skip}}}" + r"([^|\n]*)\|[^\n]*")
                      for keys in rows)


@dataclass(frozen=True)
class Run:
    """One finished command: exit code, output, wall time and the files it wrote into its
    scratch folder (name -> text)."""

    rc: int
    stdout: str
    stderr: str
    wall_s: float
    files: dict[str, str] = field(default_factory=dict)
    cpu_s: float = 0.0
    """CPU time of the command's processes (user + system, as they were reaped)."""

    def json(self) -> Any:
        """Standard output parsed as JSON."""
        return json.loads(self.stdout)

    def file_json(self, name: str) -> Any:
        """A JSON file the command wrote into its folder."""
        return json.loads(self.files[name])


_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")


def _number(doc: str) -> tuple[float, int]:
    """The first number in a documented cell and its decimals (``+3.7%`` -> (3.7, 1))."""
    m = _NUMBER.search(doc)
    if m is None:
        raise ValueError(f"no number in {doc!r}")
    text = m.group(0).replace(",", "")
    return float(text), len(text.split(".")[1]) if "." in text else 0


@dataclass(frozen=True)
class Exact:
    """Deterministic figures: the measured value, rounded to the page's own decimals, is the
    page's number (strings and ``None`` against ``-`` compare as they are)."""

    def same(self, doc: str, measured: Any) -> bool:
        if measured is None:
            return doc in ("-", "")
        if isinstance(measured, bool):
            return doc.lower() in (("true", "yes") if measured else ("false", "no"))
        if isinstance(measured, str):
            return doc == measured
        if _NUMBER.search(doc) is None:  # the page has no number ('-') where one was measured
            return False
        value, decimals = _number(doc)
        return abs(value - measured) <= 0.5 * 10 ** -decimals * (1 + 1e-9) + 1e-12

    def describe(self) -> str:
        return "exact (to the page's decimals)"


@dataclass(frozen=True)
class Ratio:
    """Wall-clock figures: measured / documented within a factor of ``factor`` either way
    (values below ``floor`` count as ``floor``: sub-second timings are mostly start-up).
    With ``total`` the cells are summed first (a table's wall column: one run's rows are
    noisier than their sum)."""

    factor: float
    why: str
    floor: float = 0.0
    total: bool = False

    def same(self, doc: str, measured: Any) -> bool:
        if measured is None:
            return doc in ("-", "")
        if _NUMBER.search(doc) is None:
            return False
        value = max(_number(doc)[0], self.floor)
        got = max(float(measured), self.floor)
        return value > 0 and got > 0 and max(got / value, value / got) <= self.factor

    def judge(self, doc: tuple[str, ...], measured: Any) -> bool:
        got = cells(measured)
        if len(got) != len(doc):
            return False
        if self.total:
            return self.same(str(sum(_number(d)[0] for d in doc)), sum(float(m) for m in got))
        return all(self.same(d, m) for d, m in zip(doc, got))

    def describe(self) -> str:
        return f"ratio{' of the totals' if self.total else ''} within {self.factor}x ({self.why})"


@dataclass(frozen=True)
class InRange:
    """A wall-clock range on the page (two cells, low and high) against one measured value:
    inside the range widened by ``factor`` each way."""

    factor: float
    why: str

    def judge(self, doc: tuple[str, ...], measured: Any) -> bool:
        low, high = (_number(d)[0] for d in doc)
        return low / self.factor <= float(measured) <= high * self.factor

    def describe(self) -> str:
        return f"inside the page's range widened {self.factor}x ({self.why})"


@dataclass(frozen=True)
class Targets:
    """A wall-clock target the page says was met (``true``, or ``N/M`` cases): the measured
    value is each case's time over its target, and a case counts as met up to ``factor``."""

    factor: float
    why: str

    def judge(self, doc: tuple[str, ...], measured: Any) -> bool:
        ratios = [float(r) for r in cells(measured)]
        met = sum(r <= self.factor for r in ratios)
        if doc[0] in ("true", "holds", "met", "kept"):
            return met == len(ratios)
        count, total = (int(x) for x in doc[0].split("/"))
        return (met, len(ratios)) == (count, total)

    def describe(self) -> str:
        return f"met where time / target <= {self.factor} ({self.why})"


@dataclass(frozen=True, kw_only=True)
class Stale:
    """Why a figure is not re-derived (a GPU, far more than about two minutes, code that is
    no longer there) and where the page gives its date."""

    why: str
    date: Page
    """The date's position on the page (one capture group)."""


def cells(value: Any) -> tuple[Any, ...]:
    """A measured value as a tuple of cells."""
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One figure of one page and how it is re-derived."""

    id: str
    """Stable name, ``page-topic-detail``."""
    where: str
    """The sentence or table row, in words."""
    figure: Page
    """How to read the documented value from the page."""
    command: str
    """The command exactly as the page documents it (run in a scratch folder that sees the
    repository's files)."""
    measured: Callable[[Run], Any] | None = None
    """How to read the value from the command's output (one item per documented cell)."""
    compare: Any = field(default_factory=lambda: Exact())
    """``Exact``, ``Ratio``, ``InRange`` or ``Targets``; or one ``Exact``/``Ratio`` per cell."""
    stale: Stale | None = None
    exit_code: int = 0
    """The exit code the page documents for the command."""

    @property
    def page(self) -> str:
        return self.figure.path

    def judge(self, doc: tuple[str, ...], measured: Any) -> bool:
        """Whether the measured value is the documented one under this claim's comparison."""
        if hasattr(self.compare, "judge"):
            return self.compare.judge(doc, measured)
        got = cells(measured)
        per_cell = self.compare if isinstance(self.compare, tuple) else (self.compare,) * len(doc)
        return len(got) == len(doc) == len(per_cell) and all(c.same(d, m) for c, d, m in zip(per_cell, doc, got))

    def describe(self) -> str:
        """The comparison in words."""
        if isinstance(self.compare, tuple):
            return "; ".join(dict.fromkeys(c.describe() for c in self.compare))
        return self.compare.describe()
