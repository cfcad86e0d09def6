"""Reading user JSON/YAML files with clear errors, and writing outputs atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.core.reader import check_values, parse_json, parse_yaml, read_input_text

__all__ = ["read_json", "read_yaml", "write_text_atomic", "write_json_atomic", "json_text", "UnreadableOutput",
           "require", "check_finite"]


def read_json(path: str | os.PathLike[str], *, what: str) -> Any:
    """Load a JSON file through the guarded reader ([Note: guarded reading] in
    ``planner.core.reader``); any problem becomes an ``InputError`` naming the file."""
    return parse_json(read_input_text(path, what=what), what=what, source=str(Path(path)))


def read_yaml(path: str | os.PathLike[str], *, what: str) -> Any:
    """Load a YAML file (JSON is valid YAML too) through the guarded reader."""
    return parse_yaml(read_input_text(path, what=what), what=what, source=str(Path(path)))


def check_finite(data: Any, *, what: str) -> None:
    """Raise ``InputError`` at the first NaN or +-Infinity (or int64 overflow, or nesting too
    deep) in ``data``, naming its path (``planner.core.reader.check_values``)."""
    check_values(data, what=what)


class UnreadableOutput(RuntimeError):
    """ppplan was about to write JSON its own reader refuses (a NaN, an infinity): a bug, not
    bad input, so not an ``InputError``."""


def json_text(obj: Any, *, what: str) -> str:
    """Indented JSON that the guarded reader reads back: NaN and infinities are refused
    (``allow_nan=False``), naming their path under ``what`` (``UnreadableOutput``), except
    the one infinity the formats hold, a free link's ``bandwidth`` (``check_values``, the
    reader's rule, so writer and reader agree)."""
    try:
        return json.dumps(obj, indent=1, allow_nan=False) + "\n"
    except ValueError:  # a non-finite float somewhere (or a cycle, which check_values reports too deep)
        try:
            check_values(obj, what=what, source="the output")
        except InputError as exc:
            raise UnreadableOutput(f"refusing to write {exc}") from None
    return json.dumps(obj, indent=1) + "\n"  # only a free link's +Infinity is left


def write_text_atomic(path: str | os.PathLike[str], text: str, *, what: str = "--out") -> None:
    """Write ``text`` through a temporary file and a rename (``planner.core.outputs``)."""
    from planner.core.outputs import write_text_atomic as write

    write(path, text, what=what)


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, what: str = "--out") -> None:
    """Serialise ``obj`` as indented JSON (``json_text``) and write it atomically."""
    write_text_atomic(path, json_text(obj, what=what), what=what)


def require(data: Any, key: str, kind: type | tuple[type, ...], *, where: str) -> Any:
    """Fetch ``data[key]`` and check its type; the error names ``where.key``."""
    if not isinstance(data, dict):
        raise InputError(where, f"expected an object, got {type(data).__name__}")
    if key not in data:
        raise InputError(f"{where}.{key}", "missing", f"add the '{key}' field")
    value = data[key]
    if kind in (int, float) or kind == (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind != int else int):
            raise InputError(f"{where}.{key}", f"expected a number, got {value!r}")
        return value
    if not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise InputError(f"{where}.{key}", f"expected {name}, got {type(value).__name__}")
    return value
