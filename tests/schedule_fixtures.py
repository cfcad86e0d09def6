"""Stage-cost fixtures shared by the schedule tests (uniform and heterogeneous stages)."""

from __future__ import annotations

import random

from planner.core.costs import P2PCost
from planner.core.placement import stage_ranks
from planner.core.stage_costs import StageCosts


def make_costs(pp: int, vpp: int = 1, *, hetero: bool = False, placement: str = "loop", seed: int = 0,
               fused_share: float | None = None) -> StageCosts:
    """pp x vpp stages; uniform (F 10 ms, I 11 ms, W 9 ms) or scaled by 0.6..1.4 per stage.

    ``fused_share`` < 1 makes F beside I of a stage pair on one rank take that share of F + I.
    """
    rnd = random.Random(seed)
    S = pp * vpp
    ranks = stage_ranks(S, pp, placement)
    scale = [rnd.uniform(0.6, 1.4) if hetero else 1.0 for _ in range(S)]
    f = tuple(0.010 * k / vpp for k in scale)
    i = tuple(0.011 * k / vpp for k in scale)
    w = tuple(0.009 * k / vpp for k in scale)
    act = tuple(int(2**30 * (rnd.uniform(0.7, 1.3) if hetero else 1.0)) // vpp for _ in range(S))
    fused = {}
    if fused_share is not None:
        fused = {(a, b): fused_share * (f[a] + i[b]) for a in range(S) for b in range(S)
                 if ranks[a] == ranks[b]}
    return StageCosts(f=f, i=i, w=w, act_bytes=act, act_w_bytes=tuple(a * 2 // 5 for a in act),
                      static_bytes=(2**33,) * S, out_bytes=(2**24,) * S, ranks=tuple(ranks),
                      fused=fused, p2p=P2PCost(latency_s=2e-5, bandwidth=5e10))
