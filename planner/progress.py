"""A small progress bar on stderr for long solves and profiles.

Drawn only when stderr is a terminal and nothing asked for quiet (``set_quiet(True)``,
done by ``--quiet``, or the environment variable ``PPPLAN_QUIET=1``); otherwise every
call is a no-op, so library code may report progress unconditionally::

    with progress("profiling", total=len(layers)) as bar:
        for layer in layers:
            ...
            bar.advance()

    with progress("solving", total=time_limit, unit="s", clock=True):   # fills with elapsed time
        phase("screening")        # the phase and best-so-far show after the bar
        note("best 1.234 s")
        solver.solve(model)

A clock bar never sits at 100%: past its total it says how far over it is and which
phase is finishing (the planner's phases stop at their wall deadlines, so that is the
last validation and writing of the plan).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["Progress", "progress", "set_quiet", "enabled", "note", "phase"]

_quiet = False
_active: list["Progress"] = []
_WIDTH = 28
_REDRAW_S = 0.1


def set_quiet(quiet: bool) -> None:
    """Silence (or re-enable) every progress bar of this process."""
    global _quiet
    _quiet = quiet


def enabled(stream: TextIO | None = None) -> bool:
    """Whether bars are drawn: not quiet and the stream (default stderr) is a terminal."""
    stream = stream or sys.stderr
    if _quiet or os.environ.get("PPPLAN_QUIET", "") not in ("", "0"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


class Progress:
    """One bar: ``label [#####.....]  42%  3.1 s`` redrawn in place."""

    def __init__(self, label: str, total: float | None, *, unit: str = "",
                 stream: TextIO | None = None, active: bool | None = None, clock: bool = False) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0.0
        self.stream = stream or sys.stderr
        self.active = enabled(self.stream) if active is None else active
        self._t0 = time.monotonic()
        self._last = 0.0
        self._lock = threading.Lock()
        self.note = ""
        self.phase = ""
        self.clock = clock
        """Whether ``done`` is elapsed time against a time limit (``progress(clock=True)``)."""

    def advance(self, amount: float = 1.0) -> None:
        """Add ``amount`` to the work done."""
        self.set(self.done + amount)

    def set(self, done: float) -> None:
        """Set the work done (clipped to the total, except for a clock bar)."""
        self.done = min(done, self.total) if self.total and not self.clock else done
        now = time.monotonic()
        if self.active and now - self._last >= _REDRAW_S:
            self._last = now
            self._draw()

    def render(self) -> str:
        """The bar's current text (without the carriage return)."""
        elapsed = time.monotonic() - self._t0
        if self.total and self.clock and self.done >= self.total:
            bar = f"[{'finishing':^{_WIDTH}}] +{self.done - self.total:.1f}{self.unit}"
        elif self.total:
            share = max(0.0, min(1.0, self.done / self.total))
            fill = int(round(share * _WIDTH))
            bar = f"[{'#' * fill}{'.' * (_WIDTH - fill)}] {share:4.0%}"
        else:
            bar = f"{self.done:.1f}{self.unit}"
        tail = "".join(f"  {x}" for x in (self.phase, self.note) if x)
        return f"{self.label} {bar}  {elapsed:.1f} s{tail}"

    def _draw(self) -> None:
        with self._lock:
            self.stream.write("\r" + self.render() + "\x1b[K")
            self.stream.flush()

    def close(self) -> None:
        """Draw the final state and end the line."""
        if self.active:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()


@contextmanager
def progress(label: str, total: float | None = None, *, unit: str = "", clock: bool = False,
             stream: TextIO | None = None) -> Iterator[Progress]:
    """A bar for the ``with`` block; ``clock=True`` fills it with elapsed seconds (time limits)."""
    bar = Progress(label, total, unit=unit, stream=stream, clock=clock)
    _active.append(bar)
    stop = threading.Event()
    ticker = None
    if clock and bar.active:
        def tick() -> None:
            while not stop.wait(_REDRAW_S):
                bar.set(time.monotonic() - bar._t0)

        ticker = threading.Thread(target=tick, name="ppplan-progress", daemon=True)
        ticker.start()
    try:
        yield bar
    finally:
        stop.set()
        _active.remove(bar)
        if ticker is not None:
            ticker.join()
        bar.close()


def note(text: str) -> None:
    """Show ``text`` after the innermost open bar (e.g. candidates evaluated, best so far);
    a no-op when no bar is open, so library code may call it unconditionally."""
    if _active:
        _active[-1].note = text


def phase(name: str) -> None:
    """Show the current phase (e.g. ``screening``) after the innermost open bar; a no-op
    when no bar is open."""
    if _active:
        _active[-1].phase = name
