"""Two parties, one compute slot: the forward and the backward of a fused pair take turns.

The forward of one microbatch runs in the calling thread and the backward of another
in a helper thread. Exactly one of them computes at a time (the holder of the baton);
each hands the baton over at a comm point, right after starting an asynchronous
all-to-all, and waits for that exchange only once it holds the baton again. So one
microbatch's exchange travels while the other microbatch computes, which is what
Megatron's combined 1F1B does with two CUDA streams (``megatron/core/pipeline_parallel/
combined_1f1b.py``) and what torchtitan's removed DualPipeV overlap callback did with
a helper thread and a two-party barrier (torchtitan PR #1443,
``torchtitan/distributed/dual_pipe_v.py``).

[Note: comm order] The hand-over points are the comm points only, and every rank of an
expert-parallel group runs the same layers in the same order, so the sequence of
all-to-alls each rank issues on the group is the same on every rank: collectives
match without any extra synchronisation.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from planner.runtime.trace import PairTrace, TracedWork

__all__ = ["Baton", "FORWARD_PARTY", "BACKWARD_PARTY"]

FORWARD_PARTY = "F"
BACKWARD_PARTY = "B"


def _other(party: str) -> str:
    return BACKWARD_PARTY if party == FORWARD_PARTY else FORWARD_PARTY


class Baton:
    """Turn-taking between the forward party (this thread) and the backward party."""

    def __init__(self, *, first: str, timeout_s: float) -> None:
        self._cv = threading.Condition()
        self._holder = first
        self._done: set[str] = set()
        self._failed = False
        self._forward_thread = threading.get_ident()
        self._timeout_s = timeout_s

    def party(self) -> str:
        """The party the calling thread works for: the thread that made the baton is the
        forward party; any other thread is the backward party (the helper, or on CUDA an
        autograd device thread working for it)."""
        return FORWARD_PARTY if threading.get_ident() == self._forward_thread else BACKWARD_PARTY

    def acquire(self, party: str) -> None:
        """Block until ``party`` holds the baton (or the other party has ended)."""
        with self._cv:
            ok = self._cv.wait_for(lambda: self._holder == party or _other(party) in self._done or self._failed,
                                   timeout=self._timeout_s)
        if not ok:
            raise TimeoutError(f"fused pair: the {_other(party)} half did not hand over within "
                               f"{self._timeout_s:g} s")

    def comm_wait(self, work: Any) -> None:
        """The wait hook of a comm point: hand over, take the baton back, then wait."""
        party = self.party()
        with self._cv:
            if _other(party) not in self._done:
                self._holder = _other(party)
                self._cv.notify_all()
        self.acquire(party)
        work.wait()

    def finish(self, party: str, *, failed: bool = False) -> None:
        """``party`` is done (or failed): the other one holds the baton from now on."""
        with self._cv:
            self._done.add(party)
            self._failed = self._failed or failed
            self._holder = _other(party)
            self._cv.notify_all()


def _traced_wait(baton: Baton, trace: PairTrace) -> Callable[[Any], None]:
    """``baton.comm_wait`` recording the exchange's issue and first completed wait
    ([Note: overlap trace] in ``planner.runtime.trace``)."""
    def hook(work: Any) -> None:
        party = baton.party()
        trace.record(party, "issue")
        baton.comm_wait(TracedWork(work, trace, party))
    return hook


def _no_event(party: str, kind: str) -> None:
    """No trace: record nothing."""


def run_pair(forward: Callable[[], Any], backward: Callable[[], None], *, timeout_s: float,
             install: Callable[[Callable[[Any], None] | None], Any], trace: PairTrace | None = None) -> Any:
    """Run ``backward`` in a helper thread and ``forward`` here, alternating at comm points
    (the backward first: Megatron's combined 1F1B starts with the backward's combine).
    ``install(hook)`` sets the comm-point wait hook and returns the previous one. Returns
    what ``forward`` returns; re-raises the first failure of either half. ``trace``, when
    given, receives the pair's events ([Note: overlap trace])."""
    import torch

    baton = Baton(first=BACKWARD_PARTY, timeout_s=timeout_s)
    errors: list[BaseException] = []
    threads = torch.get_num_threads()
    mark = trace.record if trace is not None else _no_event

    def helper() -> None:
        failed = False
        try:
            # [Note: helper threads] OpenMP's thread count is per calling thread: a new
            # thread would start with one OpenMP worker per core and oversubscribe the CPU
            torch.set_num_threads(threads)
            baton.acquire(BACKWARD_PARTY)
            mark(BACKWARD_PARTY, "start")
            backward()
        except BaseException as exc:  # handed to the calling thread, which re-raises it
            errors.append(exc)
            failed = True
        finally:
            mark(BACKWARD_PARTY, "end")
            baton.finish(BACKWARD_PARTY, failed=failed)

    previous = install(baton.comm_wait if trace is None else _traced_wait(baton, trace))
    thread = threading.Thread(target=helper, name="ppplan-fused-backward", daemon=True)
    try:
        thread.start()
        baton.acquire(FORWARD_PARTY)
        mark(FORWARD_PARTY, "start")
        try:
            out = forward()
        except BaseException:
            mark(FORWARD_PARTY, "end")
            baton.finish(FORWARD_PARTY, failed=True)
            raise
        mark(FORWARD_PARTY, "end")
        baton.finish(FORWARD_PARTY)
        thread.join()
    finally:
        install(previous)
    if errors:
        raise errors[0]
    return out
