"""Output files: checked before any work, written atomically, never over an input.

[Note: output contract] Every file ppplan writes (plan JSON, PNG, exports, profiles,
replan and replay reports) goes through this module:

1. ``check_outputs`` runs before the command does any work: an empty path, a folder,
   a folder that cannot be written, two outputs on one path, an output that is
   (after resolving symlinks) one of the command's inputs, an existing path that is not
   a regular file (``/dev/null``, a FIFO, a symlink to a device: renaming over it would
   replace the special file), or a name longer than the file system allows is an
   ``InputError`` naming the option, so a bad ``--out`` costs nothing and overwrites nothing.
2. ``write_files_atomic`` writes each file to a temporary file in its own folder, then
   ``os.replace``s them all (POSIX rename is atomic within a file system): a reader
   sees the old file or the new one, never half of one, and an error or Ctrl-C before
   the renames leaves nothing behind. Files get the mode ``open()`` would give them
   (0666 minus the umask), not ``mkstemp``'s 0600. The temporary name is
   ``.<name>.XXXXXXXX.tmp``, or ``.ppplan.XXXXXXXX.tmp`` when that would exceed the
   file system's name limit, so every name ``check_outputs`` accepts can be written.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from planner.core.errors import InputError

__all__ = ["check_outputs", "write_files_atomic", "write_bytes_atomic", "write_text_atomic"]


def _nearest_existing(p: Path) -> Path:
    for parent in (p, *p.parents):
        if all(len(os.fsencode(part)) <= 255 for part in parent.parts) and parent.exists():
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
        _check_name_length(option, p, _nearest_existing(p.parent))
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
        _check_existing(option, p)
        base = _nearest_existing(p.parent)
        if not base.is_dir():
            raise InputError(option, f"cannot write {path}: {base} is not a folder", "choose another path")
        if not os.access(base, os.W_OK | os.X_OK):
            raise InputError(option, f"cannot write {path}: folder {base} is not writable",
                             "choose a writable folder")


def _check_existing(option: str, p: Path) -> None:
    """Refuse an existing output that is not a regular file (after following symlinks)."""
    try:
        info = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        return  # absent, a dangling symlink, or under a file (the folder check below says so)
    except OSError as exc:
        raise InputError(option, f"cannot use {p}: {exc.strerror or exc}", "choose another path") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(option, f"{p} exists and is not a regular file (a device, FIFO or socket)",
                         "give a file name; use --json to print to standard output")


def _name_max(base: Path) -> int:
    try:
        return os.pathconf(base, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _check_name_length(option: str, p: Path, base: Path) -> None:
    """Refuse a file or folder name longer than the file system allows (ENAMETOOLONG)."""
    limit = _name_max(base)
    for part in p.parts:
        if len(os.fsencode(part)) > limit:
            raise InputError(option, f"the name {part[:24]}... is {len(os.fsencode(part))} bytes, above the "
                             f"file system's {limit}", "give a shorter name")
    if len(os.fsencode(os.path.abspath(p))) >= 4096:
        raise InputError(option, "the path is 4096 bytes or longer", "give a shorter path")


def _temp_prefix(target: Path) -> str:
    """``.<name>.`` unless the temporary name would exceed the name limit (see the module doc)."""
    prefix = f".{target.name}."
    fits = len(os.fsencode(prefix)) + len("XXXXXXXX.tmp") <= _name_max(_nearest_existing(target.parent))
    return prefix if fits else ".ppplan."


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
            fd, tmp = tempfile.mkstemp(dir=current.parent, prefix=_temp_prefix(current), suffix=".tmp")
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
