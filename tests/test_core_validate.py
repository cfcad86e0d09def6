"""Validator: each check fires, names rank, position and action, and draws the marked grid."""

from __future__ import annotations

import pytest

from planner.core.schedule import Action
from planner.core.validate import Violation, render_violation, validate
from solvers.schedule.families.generators import interleaved_1f1b, one_f_one_b

PP, M = 3, 4


@pytest.fixture
def costs(make_costs):
    return make_costs(PP, f=1.0, i=2.0, w=1.0, act=2**30, act_w=2**28, static=2**32)


def _sched():
    return one_f_one_b(PP, M, split_w=True)


def _only(found: list[Violation]) -> Violation:
    assert len(found) >= 1, "the validator found nothing"
    return found[0]


def _check_render(v: Violation, sched) -> str:
    text = render_violation(v, sched)
    first, *grid = text.splitlines()
    assert first == str(v)
    assert f"rank {v.rank}, position {v.position} ({v.action})" in first
    marked = [line for line in grid if ">" in line]
    assert len(marked) == 1 and marked[0].strip().startswith(f"{v.rank} |")
    assert f">{v.action}<" in marked[0]
    return text


def test_generated_schedules_are_valid(costs, make_costs):
    assert validate(_sched(), costs, num_microbatches=M, memory_limit_bytes=2**40) == []
    inter = make_costs(2, 3, f=0.5, i=1.0, w=0.25)
    assert validate(interleaved_1f1b(2, 3, 4, split_w=True), inter, num_microbatches=4) == []


def test_wrong_rank_placement(costs):
    sched = _sched()
    sched[1][2] = Action(2, "F", 1)
    v = _only(validate(sched, costs, num_microbatches=M))
    assert (v.rank, v.position, v.action) == (1, 2, "2F1")
    assert "stage 2 is placed on rank 2" in v.message
    _check_render(v, sched)


@pytest.mark.parametrize("bad, message", [(Action(7, "F", 0), "stage 7 does not exist"),
                                          (Action(0, "F", 9), "microbatch 9 out of range 0..3")])
def test_out_of_range_indices(costs, bad, message):
    sched = _sched()
    sched[0].insert(1, bad)
    v = _only(validate(sched, costs, num_microbatches=M))
    assert (v.rank, v.position) == (0, 1) and message in v.message


def test_duplicate(costs):
    sched = _sched()
    sched[2].insert(5, Action(2, "F", 0))
    v = _only(validate(sched, costs, num_microbatches=M))
    assert (v.rank, v.position, v.action) == (2, 5, "2F0")
    assert "2F0 already done at rank 2, position 0" in v.message
    _check_render(v, sched)


def test_missing(costs):
    sched = _sched()
    sched[1].remove(Action(1, "W", 3))
    v = _only(validate(sched, costs, num_microbatches=M))
    assert v.message == "1W3 is never run (rank 1 should run it)" and str(v) == v.message


def test_same_rank_order(costs):
    sched = _sched()
    acts = sched[0]
    k = acts.index(Action(0, "W", 1))
    acts[k], acts[k - 1] = acts[k - 1], acts[k]  # W1 before its I1
    v = _only(validate(sched, costs, num_microbatches=M))
    assert (v.rank, v.position, v.action) == (0, k - 1, "0W1")
    assert "runs before its predecessor 0I1 on the same rank" in v.message
    _check_render(v, sched)


def test_deadlock_across_ranks(costs):
    sched = _sched()
    # rank 0 waits for 1I0 before sending 0F1; rank 1 needs 1F1 before its 1I0.
    acts = sched[0]
    acts.remove(Action(0, "F", 1))
    acts.insert(acts.index(Action(0, "W", 0)) + 1, Action(0, "F", 1))
    found = validate(sched, costs, num_microbatches=M)
    assert found and all("deadlock" in v.message for v in found)
    assert {(v.rank, v.action) for v in found} == {(0, "0I0"), (1, "1F1"), (2, "2F1")}
    v = next(v for v in found if v.rank == 0)
    assert v.position == 2  # 0F0, 0F2, >0I0<
    _check_render(v, sched)


def test_memory_over_limit(costs):
    sched = _sched()
    # rank 0 holds 3 microbatches of 1 GiB on top of 4 GiB static: 7 GiB; allow 6.5.
    limit = int(6.5 * 2**30)
    found = validate(sched, costs, num_microbatches=M, memory_limit_bytes=limit)
    v = _only(found)
    assert [x.rank for x in found] == [0]
    assert "rank 0 peak memory 7.00 GiB exceeds the limit 6.50 GiB" in v.message
    assert (v.position, v.action) == (2, "0F2")  # the third forward crosses the limit
    _check_render(v, sched)
    assert validate(sched, costs, num_microbatches=M, memory_limit_bytes=7 * 2**30) == []


def test_static_memory_alone_over_limit(costs):
    v = _only(validate(_sched(), costs, num_microbatches=M, memory_limit_bytes=2**31))
    assert v.position is None and "exceeds the limit" in str(v)


def test_w_deadline(costs):
    sched = _sched()
    ok = validate(sched, costs, num_microbatches=M, deadlines={(0, "W", 0): 1e9})
    assert ok == []
    found = validate(sched, costs, num_microbatches=M, deadlines={(0, "W", 0): 1.0})
    v = _only(found)
    assert v.rank == 0 and v.action == "0W0"
    assert v.position == sched[0].index(Action(0, "W", 0))
    assert "0W0 ends at" in v.message and "after its deadline 1 s" in v.message
    _check_render(v, sched)


def test_validator_is_pure(costs):
    sched = _sched()
    before = {r: list(a) for r, a in sched.items()}
    validate(sched, costs, num_microbatches=M, memory_limit_bytes=1)
    assert sched == before
