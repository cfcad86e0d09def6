"""Which pipeline boundary a dependency crosses: the one rule behind every P2P delay.

Boundary ``b`` lies between stage ``b`` and stage ``b + 1``; its cost is
``StageCosts.p2p_time(b)``. A forward on stage ``s`` sends its activations to stage
``s + 1`` (boundary ``s``); an input-gradient on stage ``s`` sends its gradient back to
stage ``s - 1`` (boundary ``s - 1``). These are the two cross-stage edges of
``planner.core.schedule.DEPENDENCIES`` (the send/recv pairs torch's ``_add_send_recv``
inserts in torch/distributed/pipelining/schedules.py). The simulator's compiled form,
the list engine and the CP-SAT model all ask this function.

A boundary between ranks on different sites (``planner.core.sites``) sends over the slow
inter-site link instead: ``SiteHop`` says which boundaries cross and what they pay, and
``StageCosts.p2p_time`` charges it, so every timeline sees the same hop.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.core.costs import P2PCost
from planner.core.schedule import ActionKind

__all__ = ["crossed_boundary", "SiteHop"]


def crossed_boundary(stage: int, kind: str) -> int:
    """Boundary the result of ``kind`` (F or I) computed on ``stage`` crosses when a
    different rank uses it: ``stage`` for a forward, ``stage - 1`` for an input-gradient."""
    return stage if kind == ActionKind.F else stage - 1


@dataclass(frozen=True, kw_only=True)
class SiteHop:
    """The inter-site link a pipeline boundary pays when its two ranks sit on different sites:
    ranks are split evenly and in order over ``count`` sites (rank r on site r x count // pp)."""

    count: int
    """Sites the pipeline ranks are split over."""
    link: P2PCost
    """One crossing send: the link's latency and this boundary's share of its bandwidth."""

    def crosses(self, boundary: int, ranks: tuple[int, ...]) -> bool:
        """Whether ``boundary`` (between stage ``boundary`` and ``boundary + 1``) joins two sites."""
        if boundary + 1 >= len(ranks):
            return False
        pp = max(ranks) + 1
        return ranks[boundary] * self.count // pp != ranks[boundary + 1] * self.count // pp
