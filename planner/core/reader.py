"""The one guarded reader of user files: every JSON, YAML and JSON-lines input comes through here.

[Note: guarded reading] A file named on the command line may be anything: a FIFO that
never delivers, ``/dev/zero`` that never ends, a gigabyte of brackets, a YAML alias bomb
("billion laughs": nine anchors of nine aliases each expand to 9^9 items), an integer of
a million digits, or a key given twice. Each is refused before it costs memory or time:

1. ``read_input_text``: the path must name a regular file (``stat`` first, then the file
   is opened non-blocking and checked again with ``fstat``, so a FIFO is never waited
   on), at most ``MAX_INPUT_BYTES`` (``MAX_TRACE_BYTES`` for routing traces; checked on
   the size, then on the bytes read), UTF-8.
2. ``parse_json`` / ``parse_yaml``: duplicate keys are refused (JSON's "last one wins"
   silently drops a value); integers are read only when they fit int64 (their text is
   checked before ``int()`` runs, so a 5,000-digit number costs nothing); YAML aliases
   are refused (no input of ppplan needs them, and each alias can multiply the size of
   the document); nesting deeper than ``MAX_DEPTH`` is refused while parsing YAML and
   right after parsing JSON (Python's C parser stops at the recursion limit itself).
3. ``check_values``: after parsing, NaN, infinities, integers beyond int64 and nesting
   beyond ``MAX_DEPTH`` are refused with their path.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from planner.core.errors import InputError

__all__ = ["MAX_INPUT_BYTES", "MAX_TRACE_BYTES", "MAX_DEPTH", "INT64_MAX", "read_input_bytes", "read_input_text",
           "decode_text", "parse_json", "parse_json_record", "parse_yaml", "check_values"]

MAX_INPUT_BYTES = 64 * 2**20
"""Largest plan, cost table, cluster or config file read, in bytes: a plan of the largest
schedule the planner makes (``planner.core.limits.MAX_STAGE_MICROBATCHES``) is about 5 MB."""
MAX_TRACE_BYTES = 256 * 2**20
"""Largest routing trace file read: a Megatron tokens-per-expert log of 1000 iterations x 94
MoE layers x 128 experts of 6-digit counts is about 90 MB."""
MAX_DEPTH = 32
"""Deepest nesting of lists and objects accepted; ppplan's own formats nest at most 6 deep."""
INT64_MAX = 2**63 - 1
"""Integers in inputs must fit a signed 64-bit integer (what numpy, torch and CP-SAT hold)."""
_INT_TEXT_MAX = len(str(-(2**63)))


def read_input_bytes(path: str | os.PathLike[str], *, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ``InputError`` otherwise."""
    p = Path(path)
    try:
        info = os.stat(p)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(what, f"{p} is a folder", "give the file itself")
        _require_regular(p, info, what)
        _require_size(p, info.st_size, limit, what)
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        with os.fdopen(fd, "rb") as fh:
            _require_regular(p, os.fstat(fd), what)  # the path may have changed since stat
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(what, f"cannot read {p}: {exc.strerror or exc}", "check the path") from None
    _require_size(p, len(data), limit, what)
    return data


def read_input_text(path: str | os.PathLike[str], *, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes; ``InputError`` otherwise."""
    return decode_text(read_input_bytes(path, what=what, limit=limit), what=what, source=str(path))


def decode_text(data: bytes, *, what: str, source: str) -> str:
    """``data`` as UTF-8; ``InputError`` naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(what, f"{source} is not UTF-8 text (byte {exc.start}: {data[exc.start]:#04x})",
                         "give the JSON/YAML file itself, not a binary") from None


def _require_regular(p: Path, info: os.stat_result, what: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) else "a device"
        raise InputError(what, f"{p} is {kind}, not a regular file", "save the input to a file and give its path")


def _require_size(p: Path, size: int, limit: int, what: str) -> None:
    if size > limit:
        raise InputError(what, f"{p} is larger than the {limit // 2**20} MiB an input may be",
                         "give the file ppplan wrote, not a log or a binary")


def _parse_int(text: str) -> int:
    """JSON's integer hook: the length is checked before ``int()`` converts the digits."""
    value = int(text) if len(text) <= _INT_TEXT_MAX else None
    if value is None or abs(value) > INT64_MAX:
        raise _Refused(f"integer {text[:24]}{'...' if len(text) > 24 else ''} does not fit 64 bits",
                       "give a number below 9.2e18")
    return value


class _Refused(Exception):
    """Raised inside a parser's hook; ``parse_json``/``parse_yaml`` turn it into ``InputError``."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"key {key!r:.40} is given twice", "keep one of them")
        out[key] = value
    return out


def parse_json(text: str, *, what: str, source: str) -> Any:
    """Parse JSON ``text`` (from ``source``, for messages) under [Note: guarded reading]."""
    try:
        data = _loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(what, f"{source} is not valid JSON (line {exc.lineno}: {exc.msg})", "fix the syntax") from None
    except _Refused as exc:
        raise InputError(what, f"{source}: {exc.problem}", exc.fix) from None
    except RecursionError:
        raise _too_deep(what, source) from None
    check_values(data, what=what, source=source)
    return data


def parse_json_record(line: str, *, where: str, fix: str) -> Any:
    """One line of a JSON-lines file, guarded as ``parse_json``; errors read ``where: problem``."""
    try:
        data = _loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(where, f"not valid JSON ({exc.msg})", fix) from None
    except _Refused as exc:
        raise InputError(where, exc.problem, exc.fix) from None
    except RecursionError:
        raise _too_deep(where, "the line") from None
    check_values(data, what=where, source="the line")
    return data


def _loads(text: str) -> Any:
    return json.loads(text, object_pairs_hook=_no_duplicates, parse_int=_parse_int)


def parse_yaml(text: str, *, what: str, source: str) -> Any:
    """Parse YAML ``text`` with no aliases, no duplicate keys and bounded depth."""
    import yaml

    from planner.core.yaml_loader import GuardedLoader, YamlRefused

    loader = GuardedLoader(text)
    try:
        data = loader.get_single_data()
    except YamlRefused as exc:
        raise InputError(what, f"{source} (line {exc.line}): {exc.problem}", exc.fix) from None
    except _Refused as exc:
        raise InputError(what, f"{source}: {exc.problem}", exc.fix) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise InputError(what, f"{source} is not valid YAML{where}", "fix the syntax") from None
    finally:
        loader.dispose()
    check_values(data, what=what, source=source)
    return data


def _too_deep(what: str, source: str) -> InputError:
    return InputError(what, f"{source} nests lists or objects more than {MAX_DEPTH} deep", "fix the file")


def check_values(data: Any, *, what: str, source: str = "the file") -> None:
    """Refuse nesting beyond ``MAX_DEPTH``, integers beyond int64 and non-finite floats.

    Python's ``json`` module reads the non-standard ``NaN``/``Infinity`` literals (and
    YAML has ``.nan``/``.inf``); one NaN would otherwise flow into costs and print
    ``bubble nan%``. The one use of infinity is a link's ``bandwidth`` (a free link, as
    ``P2PCost(bandwidth=math.inf)`` saves itself); ``+Infinity`` is accepted there only.
    """
    stack: list[tuple[str, Any, int]] = [("", data, 0)]
    while stack:
        where, value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(what, source)
        if isinstance(value, float) and not math.isfinite(value) and not (
                value == math.inf and where.endswith(".bandwidth")):
            raise InputError(f"{what}{where}", f"is {value!r}", "write a finite number")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
            raise InputError(f"{what}{where}", "does not fit 64 bits", "give a number below 9.2e18")
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v, depth + 1) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v, depth + 1) for i, v in reversed(list(enumerate(value))))
