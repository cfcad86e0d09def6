"""DeepSeek's DualPipeV order (``solvers.schedule.families.dualpipev_exact``): the same actions as
torch's port of it, valid, and on uniform costs with nothing overlapped, the bubble of
DeepSeek's README formula (deepseek-ai/DualPipe README: DualPipe/DualPipeV bubble
(PP/2 - 1)(F&B + B - 3W), PP the stages, 2p here: so (p - 1)(F&B + B - 3W))."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from planner.core.costs import P2PCost
from planner.core.errors import InfeasibleError
from planner.core.simulate import simulate
from planner.core.validate import validate
from solvers.schedule.families.dualpipev_exact import dualpipev_exact


def _torch_order(p: int, m: int) -> dict[int, list[str]]:
    """torch's ``ScheduleDualPipeV`` per-rank order in ppplan's text form."""
    from torch.distributed.pipelining.schedules import ScheduleDualPipeV, _ComputationType as CT

    letter = {CT.FORWARD: "F", CT.BACKWARD_INPUT: "I", CT.BACKWARD_WEIGHT: "W", CT.FULL_BACKWARD: "B"}
    me = SimpleNamespace(pp_group_size=p, _n_microbatches=m)
    out = {}
    for r in range(p):
        row = []
        for a in ScheduleDualPipeV._calculate_single_rank_operations(me, r):
            if a.computation_type == CT.OVERLAP_F_B:
                f, b = a.sub_actions
                row.append(f"({f.stage_index}F{f.microbatch_index};{b.stage_index}B{b.microbatch_index})OVERLAP_F_B")
            else:
                row.append(f"{a.stage_index}{letter[a.computation_type]}{a.microbatch_index}")
        out[r] = row
    return out


@pytest.mark.parametrize("p,m", [(2, 4), (3, 6), (4, 8), (4, 11), (5, 17), (8, 20), (8, 32)])
def test_same_order_as_torch_schedule_dual_pipe_v(p, m):
    assert {r: [str(a) for a in row] for r, row in dualpipev_exact(p, m).items()} == _torch_order(p, m)


@pytest.mark.parametrize("p,m", [(4, 20), (8, 32), (16, 64)])
@pytest.mark.parametrize("unit", [1.0, 2.5])
def test_bubble_is_deepseeks_formula_on_uniform_costs(make_costs, p, m, unit):
    f = i = w = unit
    costs = make_costs(p, 2, f=f, i=i, w=w, act=1, placement="v",
                       p2p=P2PCost(latency_s=0.0, bandwidth=math.inf))
    costs = costs.__class__(**{**{k: getattr(costs, k) for k in costs.__dataclass_fields__},
                               "fused": {(a, b): f + i for a in range(2 * p) for b in range(2 * p)
                                         if costs.ranks[a] == costs.ranks[b]}})
    order = dualpipev_exact(p, m)
    assert validate(order, costs, num_microbatches=m) == []
    b = i + w
    bubble = simulate(order, costs).step_time - 2 * m * (f + b)   # each rank: F and B of two stages per microbatch
    assert bubble == pytest.approx((p - 1) * ((f + b) + b - 3 * w))


def test_too_few_microbatches_name_the_need():
    with pytest.raises(InfeasibleError, match="at least 2 x pp = 8 microbatches"):
        dualpipev_exact(4, 7)
