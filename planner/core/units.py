"""Byte counts as people read them: the one formatter every memory message uses."""

from __future__ import annotations

import math

__all__ = ["format_bytes"]

_BINARY = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def format_bytes(n: float, *, up: bool = False) -> str:
    """``n`` bytes in the largest binary unit it fills, two decimals (``512 B``, ``3.00 MiB``,
    ``1.50 GiB``), so a small budget never reads ``0.00 GiB``. ``up`` rounds up instead of to
    nearest: for a bound a user should raise a limit to ("at least ..."). The text parses back
    as a ``--memory-limit`` value once the space is dropped."""
    for unit, size in _BINARY:
        if abs(n) >= size:
            value = n / size
            return f"{math.ceil(value * 100) / 100 if up else value:.2f} {unit}"
    return f"{math.ceil(n) if up else round(n)} B"
