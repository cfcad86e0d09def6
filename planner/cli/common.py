"""Shared CLI plumbing: error mapping, output helpers."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

__all__ = ["run_guarded", "echo_json", "fail"]


def run_guarded(group: click.Group, argv: list[str] | None) -> int:
    """Run the click group; library ``ValueError``s become ``error: ...`` and exit code 2."""
    try:
        group.main(args=argv, prog_name="ppplan", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:  # bad options too: one line, like library errors
        hint = f" (see '{exc.ctx.command_path} --help')" if getattr(exc, "ctx", None) else ""
        click.echo(f"error: {' '.join(exc.format_message().splitlines())}{hint}", err=True)
        return 2 if exc.exit_code in (1, 2) else exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("interrupted; no output written", err=True)
        return 130
    except ValueError as exc:
        click.echo(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", err=True)
        return 2
    except CommandFailed as exc:
        return exc.code
    return 0


class CommandFailed(Exception):
    """A command that already printed its message and wants exit code ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def fail(code: int) -> None:
    """Stop the command with ``code`` (its message is already printed)."""
    raise CommandFailed(code)


def echo_json(obj: Any) -> None:
    """Print indented JSON to stdout."""
    click.echo(json.dumps(obj, indent=1))


def is_tty() -> bool:
    """Whether stderr is a terminal (progress bars only then)."""
    return sys.stderr.isatty()
