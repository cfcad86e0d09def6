"""Failures of the environment, not of ppplan: a missing dependency, a full disk or device.

``run_guarded`` reports an unexpected exception as a bug (exit 70). These are not bugs:
the user can fix them, so they get the one-line ``error:`` of bad input (exit 2) with
what to do.
"""

from __future__ import annotations

import os
import sys

__all__ = ["environment_error"]

_PACKAGES = {"ortools": "ortools", "yaml": "PyYAML", "jsonschema": "jsonschema", "numpy": "numpy",
             "networkx": "networkx", "torch": "torch", "click": "click", "matplotlib": "matplotlib"}
"""Import name -> the pip package that provides it (pyproject.toml's dependencies)."""


def environment_error(exc: BaseException) -> str | None:
    """The ``error:`` line for ``exc`` when the environment is at fault, else None (a bug)."""
    if isinstance(exc, ModuleNotFoundError):
        top = (exc.name or "").split(".")[0]
        if top not in _PACKAGES:
            return None
        return (f"missing dependency: the Python module {top!r} is not installed (install it: "
                f"pip install {_PACKAGES[top]}; or install ppplan with its dependencies: pip install .)")
    if not isinstance(exc, OSError) or exc.errno is None:
        return None
    reason = exc.strerror or os.strerror(exc.errno)
    if exc.filename is not None:
        name = str(exc.filename)
        return f"{name if len(name) <= 80 else name[:77] + '...'}: {reason} (check the path, its permissions and the free space there)"
    if _raised_by_echo(exc):
        _detach_stdout()
        return f"cannot write standard output: {reason} (redirect it to a file on a device with free space)"
    return f"operating system error: {reason}"


def _raised_by_echo(exc: BaseException) -> bool:
    """Whether ``exc`` came out of ``click.echo`` (the CLI's only way to print)."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "echo" and frame.f_globals.get("__name__") == "click.utils":
            return True
        tb = tb.tb_next
    return False


def _detach_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's final flush of the text that
    could not be written does not fail a second time (and print a traceback)."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return  # not a real file (a test's capture): nothing to flush at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
