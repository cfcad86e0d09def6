"""Reading user JSON/YAML files with clear errors, and writing outputs atomically."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from planner.core.errors import InputError

__all__ = ["read_json", "read_yaml", "write_text_atomic", "write_json_atomic", "require",
           "check_finite"]


def _read_text(path: str | os.PathLike[str], what: str) -> tuple[Path, str]:
    p = Path(path)
    try:
        return p, p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(what, f"cannot read {p}: {exc.strerror or exc}", "check the path") from None
    except UnicodeDecodeError as exc:
        raise InputError(what, f"{p} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start]:#04x})",
                         "give the JSON/YAML file itself, not a binary") from None


def read_json(path: str | os.PathLike[str], *, what: str) -> Any:
    """Load a JSON file; any I/O or syntax problem becomes an ``InputError`` naming the file."""
    p, text = _read_text(path, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(what, f"{p} is not valid JSON (line {exc.lineno}: {exc.msg})",
                         "fix the syntax") from None
    except RecursionError:
        raise InputError(what, f"{p} nests too deeply", "fix the file") from None
    check_finite(data, what=what)
    return data


def read_yaml(path: str | os.PathLike[str], *, what: str) -> Any:
    """Load a YAML file (JSON is valid YAML too) with the same error style as ``read_json``."""
    import yaml

    p, text = _read_text(path, what)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise InputError(what, f"{p} is not valid YAML{where}", "fix the syntax") from None
    check_finite(data, what=what)
    return data


def check_finite(data: Any, *, what: str) -> None:
    """Raise ``InputError`` at the first NaN or +-Infinity in ``data``, naming its path.

    Python's ``json`` module reads the non-standard ``NaN``/``Infinity`` literals (and
    YAML has ``.nan``/``.inf``); one NaN would otherwise flow into costs and print
    ``bubble nan%``. The one use of infinity is a link's ``bandwidth`` (a free link, as
    ``P2PCost(bandwidth=math.inf)`` saves itself); ``+Infinity`` is accepted there only.
    """
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value) and not (
                value == math.inf and where.endswith(".bandwidth")):
            raise InputError(f"{what}{where}", f"is {value!r}", "write a finite number")
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value))))


def write_text_atomic(path: str | os.PathLike[str], text: str, *, what: str = "--out") -> None:
    """Write ``text`` through a temporary file and a rename (``planner.core.outputs``)."""
    from planner.core.outputs import write_text_atomic as write

    write(path, text, what=what)


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, what: str = "--out") -> None:
    """Serialise ``obj`` as indented JSON and write it atomically."""
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n", what=what)


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
