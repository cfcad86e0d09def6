"""Output files: checked before any work, written atomically, never over an input.

[Note: output contract] Every file ppplan writes (plan JSON, PNG, exports, profiles,
replan and replay reports) goes through this module:

1. ``check_outputs`` runs before the command does any work: an empty path, a folder,
   a folder that cannot be written, two outputs on one path, or an output that is
   (after resolving symlinks) one of the command's inputs is an ``InputError`` naming
   the option, so a bad ``--out`` costs nothing and overwrites nothing.
2. ``write_files_atomic`` writes each file to a temporary file in its own folder, then
   ``os.replace``s them all (POSIX rename is atomic within a file system): a reader
   sees the old file or the new one, never half of one, and an error or Ctrl-C before
   the renames leaves nothing behind. Files get the mode ``open()`` would give them
   (0666 minus the umask), not ``mkstemp``'s 0600.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from planner.core.errors import InputError

__all__ = ["check_outputs", "write_files_atomic", "write_bytes_atomic", "write_text_atomic"]


def _nearest_existing(p: Path) -> Path:
    for parent in (p, *p.parents):
        if parent.exists():
            return parent
    return Path(".")


def _same(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def check_outputs(outputs: Mapping[str, str | os.PathLike[str] | None],
                  inputs: Iterable[str | os.PathLike[str] | None] = ()) -> None:
    """Refuse unusable output paths before any work (see [Note: output contract]).

    ``outputs`` maps the option that named a file (``--out``, ``--png``) to its path
    (``None`` or ``-`` for stdout: skipped); ``inputs`` are the files the command reads.
    """
    seen: dict[str, str] = {}
    input_paths = [Path(i) for i in inputs if i not in (None, "", "-")]
    for option, path in outputs.items():
        if path is None or str(path) == "-":
            continue
        if not str(path).strip():
            raise InputError(option, "is an empty path", "give a file name, e.g. plan.json")
        p = Path(path)
        if p.is_dir() or str(path).endswith(os.sep):
            raise InputError(option, f"{path} is a folder", "give a file name inside it")
        for src in input_paths:
            if _same(p, src):
                raise InputError(option, f"{path} is also an input of this command",
                                 "write to another file; inputs are never overwritten")
        real = os.path.realpath(p)
        if real in seen:
            raise InputError(option, f"{path} is also given to {seen[real]}", "give each output its own file")
        seen[real] = option
        base = _nearest_existing(p.parent)
        if not base.is_dir():
            raise InputError(option, f"cannot write {path}: {base} is not a folder", "choose another path")
        if not os.access(base, os.W_OK | os.X_OK):
            raise InputError(option, f"cannot write {path}: folder {base} is not writable",
                             "choose a writable folder")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_files_atomic(files: Mapping[str | os.PathLike[str], bytes | str], *, what: str = "--out") -> None:
    """Write every file (text or bytes) to a temporary file beside it, then rename them all.

    An ``OSError`` becomes an ``InputError`` naming ``what`` and the path; whatever goes
    wrong (Ctrl-C included) before the renames, no temporary file and no output remains.
    """
    mode = 0o666 & ~_umask()
    staged: list[tuple[str, Path]] = []
    current = Path(".")
    try:
        for path, data in files.items():
            current = Path(path)
            current.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=current.parent, prefix=f".{current.name}.", suffix=".tmp")
            staged.append((tmp, current))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode() if isinstance(data, str) else data)
            os.chmod(tmp, mode)
        for tmp, target in staged:
            current = target
            os.replace(tmp, target)
    except OSError as exc:
        raise InputError(what, f"cannot write {current}: {exc.strerror or exc}",
                         "choose a writable folder with free space") from None
    finally:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, what: str = "--out") -> None:
    """One file through ``write_files_atomic``."""
    write_files_atomic({path: data}, what=what)


def write_text_atomic(path: str | os.PathLike[str], text: str, *, what: str = "--out") -> None:
    """One text file (UTF-8) through ``write_files_atomic``."""
    write_files_atomic({path: text}, what=what)
