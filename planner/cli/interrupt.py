"""Ctrl-C (and SIGTERM, SIGHUP) within about a second, in every phase, with nothing written.

[Note: Ctrl-C] Python turns SIGINT into ``KeyboardInterrupt`` only between bytecodes
of the main thread. A long call into native code (a CP-SAT solve, a torch kernel)
would hold it until the call returns: the whole ``--time-limit`` for a CP-SAT polish.
CP-SAT also installs its own SIGINT handler during a solve unless its
``catch_sigint_signal`` parameter is false (ortools ``sat_parameters.proto``), which
swallows the signal; ppplan's solvers set it false, so the signal reaches Python.

``interruptible()`` keeps Python's handler and adds a watchdog thread woken through
``signal.set_wakeup_fd`` (the C-level handler writes the signal number there at
once, whatever the main thread is doing). If the main thread has not raised
``KeyboardInterrupt`` within ``GRACE_S`` (it is inside native code), the watchdog
prints the same line ``run_guarded`` would and ends the process with exit code 130.
That abandons the partial work safely: outputs are written last, through temporary
files and renames (``planner.core.outputs``), so an exit before the renames leaves
no output and no temporary file that the Python path would not also have removed.

SIGTERM and SIGHUP (a job scheduler's stop, a closed terminal) take the same path as
``Terminated``, a ``KeyboardInterrupt`` subclass: ``finally`` blocks stop the replay
ranks and profiler workers this process started, and the exit code is 128 + signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["interruptible", "GRACE_S", "INTERRUPT_MESSAGE", "Terminated", "stop_message"]

GRACE_S = 0.5
"""Seconds the main thread has to raise ``KeyboardInterrupt`` before the watchdog exits."""

INTERRUPT_MESSAGE = "interrupted; no output written"


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C's ``KeyboardInterrupt`` so every ``finally``
    that stops child processes (replay ranks, profiler workers) runs; exit 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


def stop_message(signum: int) -> str:
    """The one stderr line for a stop by ``signum``."""
    if signum == signal.SIGINT:
        return INTERRUPT_MESSAGE
    return f"stopped by {signal.Signals(signum).name}; no output written"


def _stop_signals() -> list[int]:
    """SIGINT, SIGTERM, and SIGHUP unless it is ignored (``nohup``: the user asked to ignore it)."""
    return [signal.SIGINT, signal.SIGTERM] + ([] if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
                                               else [signal.SIGHUP])


def _kill_children() -> None:
    """Kill the processes this one started (replay ranks, profiler workers) before an exit
    that skips the ``finally`` blocks that would have stopped them."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Run the body with the stop-signal watchdog (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    handled = threading.Event()
    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
        handled.set()
        raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)

    def watch() -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if stop.is_set() or not data:
                return
            caught = [n for n in watched if n in data]
            if caught and not handled.wait(GRACE_S) and not stop.is_set():
                _kill_children()
                sys.stderr.write(stop_message(caught[0]) + "\n")
                sys.stderr.flush()
                os._exit(128 + caught[0])

    watched = _stop_signals()
    previous = {n: signal.signal(n, on_signal) for n in watched}
    old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watcher = threading.Thread(target=watch, name="ppplan-sigint-watchdog", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        signal.set_wakeup_fd(old_fd)
        for number, handler in previous.items():
            signal.signal(number, handler)
        os.close(write_fd)  # wakes the watchdog (EOF) so it returns
        watcher.join(timeout=1.0)
        os.close(read_fd)
