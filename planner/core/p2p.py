"""Which pipeline boundary a dependency crosses: the one rule behind every P2P delay.

Boundary ``b`` lies between stage ``b`` and stage ``b + 1``; its cost is
``StageCosts.p2p_time(b)``. A forward on stage ``s`` sends its activations to stage
``s + 1`` (boundary ``s``); an input-gradient on stage ``s`` sends its gradient back to
stage ``s - 1`` (boundary ``s - 1``). These are the two cross-stage edges of
``planner.core.schedule.DEPENDENCIES`` (the send/recv pairs torch's ``_add_send_recv``
inserts in torch/distributed/pipelining/schedules.py). The simulator's compiled form,
the list engine and the CP-SAT model all ask this function.
"""

from __future__ import annotations

from planner.core.schedule import ActionKind

__all__ = ["crossed_boundary"]


def crossed_boundary(stage: int, kind: str) -> int:
    """Boundary the result of ``kind`` (F or I) computed on ``stage`` crosses when a
    different rank uses it: ``stage`` for a forward, ``stage - 1`` for an input-gradient."""
    return stage if kind == ActionKind.F else stage - 1
