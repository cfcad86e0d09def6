"""The ``ppplan`` command line: thin click commands over the library.

Each command lives in its own module and is registered here. Errors from the library
(``ValueError`` subclasses: bad input, infeasible requests) become one line on stderr
and exit code 2, with no traceback and no output file.
"""

from __future__ import annotations

import os
import sys

import click

from planner.cli.common import run_guarded

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ppplan")
def cli() -> None:
    """Overlap-aware pipeline-parallel planner for dense and MoE transformers."""


def _register() -> None:
    import importlib

    for mod in ("plan_cmd", "profile_cmd", "check_cmds", "export_cmd", "replay_cmd", "replan_cmd"):
        try:
            module = importlib.import_module(f"planner.cli.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name == f"planner.cli.{mod}":
                continue
            raise
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``argv`` None: the process's own arguments)."""
    code = run_guarded(cli, argv)
    if code in (130, 129, 143) and argv is None:  # Ctrl-C, SIGHUP, SIGTERM
        # Ctrl-C ([Note: Ctrl-C] in planner/cli/interrupt.py): outputs and temporary files are
        # already settled, so skip the interpreter's teardown, which takes seconds after torch
        # has run (measured: 1.2-3 s after a profile). Only for the real process, never a caller.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
