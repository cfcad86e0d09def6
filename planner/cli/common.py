"""Shared CLI plumbing: error mapping, output helpers."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import click

from planner.cli.environment import environment_error
from planner.cli.interrupt import INTERRUPT_MESSAGE, Terminated, interruptible, stop_message
from planner.core.errors import BudgetExhausted, InfeasibleError, InputError
from planner.core.jsonio import json_text
from planner.core.outputs import check_outputs

__all__ = ["run_guarded", "defer_warning", "echo_json", "fail", "USER_ERRORS", "BUG_EXIT", "BUDGET_EXIT", "FiniteFloat", "SEED_MAX",
           "check_outputs"]


USER_ERRORS: tuple[type[BaseException], ...] = (InputError, InfeasibleError)
"""The project's own error types: bad input or an infeasible request, exit code 2."""

BUDGET_EXIT = 3
"""Exit code when the search found no plan within its budget and nothing proved that none
exists (``BudgetExhausted``): not the 2 of bad input or a proven infeasibility."""

SEED_MAX = 2**63 - 1
"""Largest ``--seed``: what numpy, torch and CP-SAT take (a signed 64-bit integer)."""

BUG_EXIT = 70
"""Exit code of an unexpected exception (a bug): ``EX_SOFTWARE`` of BSD sysexits.h."""


_WARNINGS = "ppplan.warnings"
"""``click.Context.meta`` key of the warnings a command prints once it has succeeded."""


def defer_warning(ctx: click.Context | None, text: str) -> None:
    """Print ``warning: text`` on stderr after the command succeeds (``run_guarded``): a
    command that is refused prints its one error line and nothing else."""
    if ctx is None:
        click.echo(f"warning: {text}", err=True)
        return
    ctx.find_root().meta.setdefault(_WARNINGS, []).append(text)


def run_guarded(group: click.Group, argv: list[str] | None) -> int:
    """Run the click group and map what escapes it to one stderr line and an exit code.

    ``InputError``/``InfeasibleError`` and click's usage errors: ``error: ...``, exit 2.
    ``BudgetExhausted`` (no plan within the budget, not proven infeasible): exit ``BUDGET_EXIT``.
    Ctrl-C: exit 130 (outputs are written last and atomically, so nothing was written).
    Any other exception is a bug, not bad input: one line naming it and asking for a
    report, exit ``BUG_EXIT``; ``PPPLAN_DEBUG=1`` re-raises it for the full traceback.
    """
    try:
        with interruptible():  # [Note: Ctrl-C]
            # group.main() minus its KeyboardInterrupt handling (an empty line, then Abort)
            args = list(argv) if argv is not None else sys.argv[1:]
            with group.make_context("ppplan", args) as ctx:
                group.invoke(ctx)
                for line in ctx.meta.get(_WARNINGS, ()):  # only after success: an error stays one line
                    click.echo(f"warning: {line}", err=True)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.NoArgsIsHelpError as exc:  # bare ``ppplan``: the help, as click prints it
        click.echo(exc.ctx.get_help(), err=True)
        return 2
    except click.ClickException as exc:  # bad options too: one line, like library errors
        hint = f" (see '{exc.ctx.command_path} --help')" if getattr(exc, "ctx", None) else ""
        click.echo(f"error: {' '.join(exc.format_message().splitlines())}{hint}", err=True)
        return 2 if exc.exit_code in (1, 2) else exc.exit_code
    except Terminated as exc:  # SIGTERM, SIGHUP: as Ctrl-C, with the signal's exit code
        click.echo(stop_message(exc.exit_code - 128), err=True)
        return exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo(INTERRUPT_MESSAGE, err=True)
        return 130
    except BudgetExhausted as exc:  # before USER_ERRORS: a subclass of InfeasibleError
        click.echo(f"error: {str(exc).splitlines()[0]}", err=True)
        return BUDGET_EXIT
    except USER_ERRORS as exc:
        click.echo(f"error: {str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__}", err=True)
        return 2
    except CommandFailed as exc:
        return exc.code
    except BrokenPipeError:  # ``ppplan plan | head``: the reader left; stop quietly like other tools
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return 141  # 128 + SIGPIPE, what a shell reports for a pipe writer that was cut off
    except Exception as exc:  # noqa: BLE001 - the last resort: a bug, said as such
        if (message := environment_error(exc)) is not None:  # a missing package, a full disk: not a bug
            click.echo(f"error: {message}", err=True)
            return 2
        if os.environ.get("PPPLAN_DEBUG", "") not in ("", "0"):
            raise
        text = " ".join(str(exc).split())[:200]
        click.echo(f"internal error: {type(exc).__name__}{': ' + text if text else ''} -- this is a bug in "
                   f"ppplan, please report it at the issue tracker (rerun with PPPLAN_DEBUG=1 for the "
                   f"traceback)", err=True)
        return BUG_EXIT
    return 0


class FiniteFloat(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf`` (which ``float()`` reads)."""

    name = "float"

    def convert(self, value, param, ctx):  # noqa: D102 - click's hook
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class CommandFailed(Exception):
    """A command that already printed its message and wants exit code ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def fail(code: int) -> None:
    """Stop the command with ``code`` (its message is already printed)."""
    raise CommandFailed(code)


def echo_json(obj: Any) -> None:
    """Print indented JSON to stdout, as strict as a written file: a NaN or an infinity is
    ``UnreadableOutput`` (a bug, reported as one), never a ``NaN`` a JSON reader refuses."""
    click.echo(json_text(obj, what="stdout"), nl=False)


def is_tty() -> bool:
    """Whether stderr is a terminal (progress bars only then)."""
    return sys.stderr.isatty()
