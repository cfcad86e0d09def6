"""The validator's structural checks in array form agree with its per-action checks
([Note: checks in array form] in ``planner.core.validate``)."""

from __future__ import annotations

import random

import pytest

from planner.core.compiled import DeadlockError, compile_sound
from planner.core.schedule import Action, ActionKind
from planner.core.validate import _check_coverage, _check_placement, _check_rank_order, validate
from solvers.schedule.families.generators import interleaved_1f1b, one_f_one_b
from test_steady import zb_costs


def _slow_ok(sched, costs, m) -> bool:
    return not (_check_placement(sched, costs, m) or _check_coverage(sched, costs, m)
                or _check_rank_order(sched, costs))


def _mutants(sched, rng: random.Random, count: int):
    ranks = sorted(sched)
    for _ in range(count):
        s = {r: list(row) for r, row in sched.items()}
        r = rng.choice(ranks)
        row = s[r]
        i, j = rng.randrange(len(row)), rng.randrange(len(row))
        how = rng.choice(["swap", "drop", "dup", "move", "mb"])
        if how == "swap":
            row[i], row[j] = row[j], row[i]
        elif how == "drop":
            del row[i]
        elif how == "dup":
            row.insert(j, row[i])
        elif how == "move":
            s[rng.choice(ranks)].append(row.pop(i))
        else:
            a = row[i]
            if a.kind != ActionKind.OVERLAP_F_B:
                row[i] = Action(a.stage, a.kind, a.microbatch + rng.choice((-1, 1, 100)))
        yield s


@pytest.mark.parametrize("make,m", [(lambda: one_f_one_b(4, 8, split_w=True), 8),
                                    (lambda: one_f_one_b(4, 8, fuse=True), 8),
                                    (lambda: one_f_one_b(4, 8), 8)])
def test_array_checks_agree_with_the_per_action_checks(make, m):
    c = zb_costs(4)
    rng = random.Random(7)
    base = make()
    assert compile_sound(base, c.num_stages, c.ranks, m) is not None
    agreed = failed = 0
    for s in _mutants(base, rng, 150):
        try:
            comp = compile_sound(s, c.num_stages, c.ranks, m)
        except DeadlockError:
            assert _slow_ok(s, c, m)  # only a sound schedule gets as far as the deadlock check
            continue
        assert (comp is not None) == _slow_ok(s, c, m)
        agreed += 1
        failed += comp is None
    assert agreed > 100 and failed > 50  # most mutants break a structural rule


def test_interleaved_schedule_is_sound_and_validates_the_same():
    from planner.core.placement import stage_ranks
    from planner.core.stage_costs import StageCosts

    c0 = zb_costs(8)
    c = StageCosts(f=c0.f, i=c0.i, w=c0.w, act_bytes=c0.act_bytes, act_w_bytes=c0.act_w_bytes,
                   static_bytes=c0.static_bytes, out_bytes=c0.out_bytes, ranks=tuple(stage_ranks(8, 4)), p2p=c0.p2p)
    sched = interleaved_1f1b(4, 2, 8)
    assert compile_sound(sched, 8, c.ranks, 8) is not None
    assert validate(sched, c, num_microbatches=8) == []
    assert compile_sound(sched, 8, c.ranks, 9) is None  # microbatch 8 never runs
    assert "never run" in str(validate(sched, c, num_microbatches=9)[0])
