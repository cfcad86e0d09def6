"""JSON-lines records with one-line errors naming the file and line (routing traces and
Megatron's tokens-per-expert logs share this reader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from planner.core.errors import InputError
from planner.core.reader import parse_json_record

__all__ = ["json_records"]


def json_records(path: Path, text: str, *, fix: str, fields: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, ``path:line``, record) for every non-blank line of ``text``; a line
    that is not a JSON object is an ``InputError`` (``fix``: how to write a valid line;
    ``fields``: what the object should hold, for the message)."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        rec = parse_json_record(line, where=where, fix=fix)
        if not isinstance(rec, dict):
            raise InputError(where, f"expected a JSON object with {fields}")
        yield lineno, where, rec
