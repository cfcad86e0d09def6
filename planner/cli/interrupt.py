"""Ctrl-C within about a second, in every phase, with nothing written.

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
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["interruptible", "GRACE_S", "INTERRUPT_MESSAGE"]

GRACE_S = 0.5
"""Seconds the main thread has to raise ``KeyboardInterrupt`` before the watchdog exits."""

INTERRUPT_MESSAGE = "interrupted; no output written"


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Run the body with the SIGINT watchdog (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    handled = threading.Event()
    stop = threading.Event()

    def on_sigint(signum, frame):  # noqa: ARG001 - signal handler signature
        handled.set()
        raise KeyboardInterrupt

    def watch() -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if stop.is_set() or not data:
                return
            if signal.SIGINT in data and not handled.wait(GRACE_S) and not stop.is_set():
                sys.stderr.write(INTERRUPT_MESSAGE + "\n")
                sys.stderr.flush()
                os._exit(130)

    previous = signal.signal(signal.SIGINT, on_sigint)
    old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watcher = threading.Thread(target=watch, name="ppplan-sigint-watchdog", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGINT, previous)
        os.close(write_fd)  # wakes the watchdog (EOF) so it returns
        watcher.join(timeout=1.0)
        os.close(read_fd)
