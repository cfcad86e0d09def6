"""Reading user JSON/YAML files with clear errors, and writing outputs atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from planner.core.errors import InputError

__all__ = ["read_json", "read_yaml", "write_text_atomic", "write_json_atomic", "require"]


def _read_text(path: str | os.PathLike[str], what: str) -> tuple[Path, str]:
    p = Path(path)
    try:
        return p, p.read_text()
    except OSError as exc:
        raise InputError(what, f"cannot read {p}: {exc.strerror or exc}", "check the path") from None


def read_json(path: str | os.PathLike[str], *, what: str) -> Any:
    """Load a JSON file; any I/O or syntax problem becomes an ``InputError`` naming the file."""
    p, text = _read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(what, f"{p} is not valid JSON (line {exc.lineno}: {exc.msg})",
                         "fix the syntax") from None


def read_yaml(path: str | os.PathLike[str], *, what: str) -> Any:
    """Load a YAML file (JSON is valid YAML too) with the same error style as ``read_json``."""
    import yaml

    p, text = _read_text(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise InputError(what, f"{p} is not valid YAML{where}", "fix the syntax") from None


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never half-written."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual file mode
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Serialise ``obj`` as indented JSON and write it atomically."""
    write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


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
