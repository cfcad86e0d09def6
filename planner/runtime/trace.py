"""An event trace of fused pairs: when each half computed and when its exchanges travelled.

[Note: overlap trace] A fused pair overlaps when one half computes while the other
half's all-to-all travels. The trace records, in one order shared by both threads
(a counter under a lock) and with ``time.perf_counter`` times:

- ``start`` / ``end``: a half begins (holding the baton) and ends;
- ``issue``: the half reached a comm point, its exchange already issued (recorded before
  the hand-over);
- ``done``: the first ``wait()`` on the work handed to the comm point returned, whoever
  called it (the hand-over code or anything it calls).

An exchange is hidden when a whole compute segment of the other half lies inside its
window (``exposed``): a fact about order, not about how long anything took, so it holds
on a loaded machine. Off by default; ``attach(schedule, traces=[...])`` or
``run_pair(..., trace=PairTrace())`` turn it on (a lock and a list append per event).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["PairEvent", "PairTrace", "TracedWork", "EVENT_KINDS"]

EVENT_KINDS = ("start", "issue", "done", "end")


@dataclass(frozen=True, kw_only=True)
class PairEvent:
    """One event of one half of a fused pair."""

    seq: int
    """Position in the pair's event order (both halves share one counter)."""
    party: str
    """``F`` (forward half) or ``B`` (backward half)."""
    kind: str
    """One of ``EVENT_KINDS``."""
    t: float
    """``time.perf_counter()`` when recorded, seconds."""


class PairTrace:
    """The events of one fused pair ([Note: overlap trace])."""

    def __init__(self) -> None:
        self.events: list[PairEvent] = []
        self._lock = threading.Lock()

    def record(self, party: str, kind: str) -> None:
        with self._lock:
            self.events.append(PairEvent(seq=len(self.events), party=party, kind=kind, t=time.perf_counter()))

    def segments(self, party: str) -> list[tuple[PairEvent, PairEvent]]:
        """(first, last) event of each compute segment of ``party``, in order."""
        out, begin = [], None
        for e in self._of(party):
            if e.kind in ("start", "done"):
                begin = e
            elif begin is not None:
                out.append((begin, e))
                begin = None
        return out

    def windows(self, party: str) -> list[tuple[PairEvent, PairEvent | None]]:
        """(issue, done) of each exchange of ``party``, done None if never waited for."""
        out: list[tuple[PairEvent, PairEvent | None]] = []
        for e in self._of(party):
            if e.kind == "issue":
                out.append((e, None))
            elif e.kind == "done":
                k = next(i for i in range(len(out) - 1, -1, -1) if out[i][1] is None)
                out[k] = (out[k][0], e)
        return out

    def overlappable(self, party: str) -> list[tuple[PairEvent, PairEvent | None]]:
        """Exchanges of ``party`` issued while the other half still ran: those issued after it
        ended have nothing to hide behind and are not counted (nor is a half without
        exchanges, such as the input-gradient I of a first stage, whose token ids have no
        gradient)."""
        other_end = next((e.seq for e in self.events if e.party != party and e.kind == "end"), len(self.events))
        return [(issue, done) for issue, done in self.windows(party) if issue.seq < other_end]

    def exposed(self, party: str) -> list[tuple[PairEvent, PairEvent | None]]:
        """Overlappable exchanges of ``party`` whose window holds no whole compute segment of
        the other half.

        A half's compute segments run from ``start`` or ``done`` to the next ``issue`` or
        ``end``; an exchange's window runs from its ``issue`` to its ``done``. The test fails
        when the halves run one after the other, or when an exchange is waited for before the
        other half computes. Not seen: a wait inside a layer before its comm point
        (``profiler.layers.program``), which ends the exchange before the window opens.
        """
        segs = [s for p in {e.party for e in self.events} - {party} for s in self.segments(p)]
        return [(issue, done) for issue, done in self.overlappable(party)
                if not any(issue.seq < a.seq and (done is None or b.seq < done.seq) for a, b in segs)]

    def to_rows(self) -> list[tuple[int, str, str, float]]:
        """Plain rows (seq, party, kind, t), e.g. to send between processes."""
        return [(e.seq, e.party, e.kind, e.t) for e in self.events]

    @classmethod
    def from_rows(cls, rows: list[tuple[int, str, str, float]]) -> "PairTrace":
        trace = cls()
        trace.events = [PairEvent(seq=s, party=p, kind=k, t=t) for s, p, k, t in rows]
        return trace

    def _of(self, party: str) -> list[PairEvent]:
        return [e for e in self.events if e.party == party]


class TracedWork:
    """An exchange's work handle that records ``done`` when its first ``wait()`` returns."""

    def __init__(self, work: Any, trace: PairTrace, party: str) -> None:
        self._work, self._trace, self._party = work, trace, party
        self._waited = False

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        out = self._work.wait(*args, **kwargs)
        if not self._waited:
            self._waited = True
            self._trace.record(self._party, "done")
        return out

    def is_completed(self) -> bool:
        return self._work.is_completed()
