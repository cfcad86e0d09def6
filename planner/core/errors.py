"""Errors raised at the boundaries (user input) and for infeasible requests.

Both subclass ``ValueError`` so callers that only know the standard library can
catch them; the CLI maps them to exit code 2 with a one-line message.
"""

from __future__ import annotations

__all__ = ["InputError", "InfeasibleError"]


class InputError(ValueError):
    """A user-supplied file or option is malformed; the message names the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        text = f"{field}: {problem}"
        if fix:
            text += f" ({fix})"
        super().__init__(text)


class InfeasibleError(ValueError):
    """A well-formed request that no plan can satisfy (memory, divisibility, deadlines).

    The message names the stage or task, the numbers involved and the knob to turn.
    """
