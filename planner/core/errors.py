"""Errors raised at the boundaries (user input) and for infeasible requests.

Both subclass ``ValueError`` so callers that only know the standard library can
catch them; the CLI maps them to exit code 2 with a one-line message.
"""

from __future__ import annotations

__all__ = ["InputError", "InfeasibleError", "BudgetExhausted", "NOT_PROVEN"]


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


NOT_PROVEN = "no plan found within the search budget; not proven infeasible"
"""How every ``BudgetExhausted`` message starts."""


class BudgetExhausted(InfeasibleError):
    """The search ran out of budget (``--work`` or the ``--time-limit`` cap) before it found
    a plan, and nothing proved that none exists.

    A subclass of ``InfeasibleError`` so that a search that tries alternatives moves on to
    the next one as for any candidate that failed, but never reported as infeasibility:
    the message starts with ``NOT_PROVEN`` and names the budget to raise, and the CLI exits
    with ``planner.cli.common.BUDGET_EXIT``, not 2.
    """

    def __init__(self, detail: str, fix: str = "raise --work (or --time-limit, when given)") -> None:
        super().__init__(f"{NOT_PROVEN}: {detail}; {fix}")
