"""Progress on stderr for long solves and profiles: a live bar, or a line per phase.

On a terminal a bar is redrawn in place. When stderr is not a terminal (a CI log, a
launcher capturing output) the same progress comes as plain lines: one when a phase
starts, with the best result so far, one every ``HEARTBEAT_S`` during a long phase, and
one at the end; nothing at all for a run that ends within ``LINES_AFTER_S`` (a refusal
stays the one ``error:`` line). Nothing is written when something asked for quiet
(``set_quiet(True)``, done by ``--quiet``, or the environment variable
``PPPLAN_QUIET=1``); library code may report progress unconditionally (example at
``progress``). ``milestone`` reports a result worth showing at once (the planner's
first valid plan): the bar shows it, and each callback registered with ``listening``
receives it (how a launcher or a benchmark learns when the first plan came).

A clock bar never sits at 100%: past its total it says how far over it is and which
phase is finishing (the planner's phases stop at their wall deadlines, so that is the
last validation and writing of the plan).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["Progress", "progress", "set_quiet", "enabled", "lines_enabled", "note", "phase", "milestone", "heard",
           "listening", "LINES_AFTER_S", "HEARTBEAT_S"]

_quiet = False
_active: list["Progress"] = []
_listeners: list[Callable[[str, Mapping[str, Any]], None]] = []
_WIDTH = 28
_REDRAW_S = 0.1
LINES_AFTER_S = 2.0
"""Off a terminal, no line is written before this many seconds of a bar have passed."""
HEARTBEAT_S = 30.0
"""Off a terminal, a phase that lasts longer gets a line this often."""


def set_quiet(quiet: bool) -> None:
    """Silence (or re-enable) every progress bar of this process."""
    global _quiet
    _quiet = quiet


def _silenced() -> bool:
    return _quiet or os.environ.get("PPPLAN_QUIET", "") not in ("", "0")


def _is_tty(stream: TextIO) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


def enabled(stream: TextIO | None = None) -> bool:
    """Whether bars are drawn: not quiet and the stream (default stderr) is a terminal."""
    return not _silenced() and _is_tty(stream or sys.stderr)


def lines_enabled(stream: TextIO | None = None) -> bool:
    """Whether progress comes as lines: not quiet and the stream is not a terminal."""
    return not _silenced() and not _is_tty(stream or sys.stderr)


class Progress:
    """One bar: ``label [#####.....]  42%  3.1 s  phase  note`` redrawn in place, or off a
    terminal ``label: phase (3.1 s; note)`` lines."""

    def __init__(self, label: str, total: float | None, *, unit: str = "",
                 stream: TextIO | None = None, active: bool | None = None, clock: bool = False) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0.0
        self.stream = stream or sys.stderr
        self.active = enabled(self.stream) if active is None else active
        self.lines = not self.active and active is None and lines_enabled(self.stream)
        """Whether this bar writes lines instead (stderr is not a terminal)."""
        self._written = 0.0
        """When the last line was written (0: none yet)."""
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
        elif self.lines and now - (self._written or self._t0) >= HEARTBEAT_S:
            self._line(self.phase or "working")

    def set_phase(self, name: str) -> None:
        """Enter phase ``name``; off a terminal, a line says so with the best so far."""
        if name != self.phase and self.lines:
            self._line(name)
        self.phase = name

    def _line(self, what: str) -> None:
        """One progress line (off a terminal), once the bar has run ``LINES_AFTER_S``."""
        now = time.monotonic()
        if now - self._t0 < LINES_AFTER_S:
            return
        self._written = now
        shown = _tail(what, self.note)
        head, _, rest = shown.partition("  ")
        with self._lock:
            self.stream.write(f"{self.label}: {head} ({now - self._t0:.1f} s{'; ' + rest if rest else ''})\n")
            self.stream.flush()

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
        shown = _tail(self.phase, self.note)
        return f"{self.label} {bar}  {elapsed:.1f} s{'  ' + shown if shown else ''}"

    def _draw(self) -> None:
        with self._lock:
            self.stream.write("\r" + self.render() + "\x1b[K")
            self.stream.flush()

    def close(self, *, finished: bool = True) -> None:
        """Draw the final state and end the line; off a terminal, a ``done`` line when the
        work ``finished`` (on an error the error line follows instead)."""
        if self.active:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
        elif self.lines and self._written and finished:
            self._line("done")


def _tail(phase: str, note: str) -> str:
    """Phase, then note, the phase's name once ("screening 1/9, best 1.2 s", not
    "screening  screening 1/9, best 1.2 s")."""
    if phase and note.startswith(phase):
        return note
    return "  ".join(x for x in (phase, note) if x)


@contextmanager
def progress(label: str, total: float | None = None, *, unit: str = "", clock: bool = False,
             stream: TextIO | None = None) -> Iterator[Progress]:
    """A bar for the ``with`` block; ``clock=True`` fills it with elapsed seconds (time limits)::

        with progress("profiling", total=len(layers)) as bar:
            for layer in layers:
                ...
                bar.advance()

        with progress("solving", total=time_limit, unit="s", clock=True):   # fills with elapsed time
            phase("screening")        # the phase and best-so-far show after the bar
            note("best 1.234 s")
            solver.solve(model)
    """
    bar = Progress(label, total, unit=unit, stream=stream, clock=clock)
    _active.append(bar)
    stop = threading.Event()
    ticker = None
    if clock and (bar.active or bar.lines):
        def tick() -> None:
            while not stop.wait(_REDRAW_S):
                bar.set(time.monotonic() - bar._t0)

        ticker = threading.Thread(target=tick, name="ppplan-progress", daemon=True)
        ticker.start()
    finished = False
    try:
        yield bar
        finished = True
    finally:
        stop.set()
        _active.remove(bar)
        if ticker is not None:
            ticker.join()
        bar.close(finished=finished)


def note(text: str) -> None:
    """Show ``text`` after the innermost open bar (e.g. candidates evaluated, best so far);
    a no-op when no bar is open, so library code may call it unconditionally."""
    if _active:
        _active[-1].note = text


def phase(name: str) -> None:
    """Show the current phase (e.g. ``screening``) after the innermost open bar; a no-op
    when no bar is open."""
    if _active:
        _active[-1].set_phase(name)


def milestone(event: str, text: str, **fields: Any) -> None:
    """Report ``event`` (e.g. ``first plan``) at once: ``text`` becomes the innermost bar's
    note, drawn now on a terminal (off one, its phase line follows the ``LINES_AFTER_S`` rule), and
    every ``listening`` callback gets ``(event, fields)``. Quiet silences the bar, never the
    callbacks; with no bar and no callback it is a no-op."""
    if _active:
        bar = _active[-1]
        bar.note = text
        bar.set_phase(event)
        if bar.active:
            bar._draw()  # now, not at the next tick: the next phase's note may replace it first
    for callback in list(_listeners):
        callback(event, fields)


def heard() -> bool:
    """Whether a ``milestone`` reported now would reach anyone (an open bar or a ``listening``
    callback): work done only to be reported can be skipped when it would not."""
    return bool(_active or _listeners)


@contextmanager
def listening(callback: Callable[[str, Mapping[str, Any]], None]) -> Iterator[None]:
    """Call ``callback(event, fields)`` for each ``milestone`` reported inside the block; an
    exception it raises goes up through the caller (a benchmark stops a plan that way)::

        seen = []
        with listening(lambda event, fields: seen.append((event, time.process_time()))):
            planner.api.plan(...)
    """
    _listeners.append(callback)
    try:
        yield
    finally:
        _listeners.remove(callback)
