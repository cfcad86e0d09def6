"""best_schedule: the chosen schedule, memory limits, deadlines, lower bound and bad input."""

from __future__ import annotations

import random

import pytest

from planner.core.errors import InfeasibleError, InputError
from planner.core.simulate import simulate
from planner.core.validate import validate
from schedule_fixtures import make_costs
from solvers.schedule.search.deadlines import earliest_finish, parse_deadlines
from solvers.schedule.engines.list_scheduler import list_schedule
from solvers.schedule.search.lower_bound import bound_parts, step_lower_bound
from solvers.schedule.engines.memory_limit import MemoryLimit, parse_memory_limit, rank_activation
from solvers.schedule.search.search import best_schedule, generate
from solvers.schedule.engines.w_fill import fill_w


@pytest.mark.parametrize("hetero", [False, True], ids=["uniform", "hetero"])
@pytest.mark.parametrize("pp,vpp,placement,m,k", [(4, 1, "loop", 12, 4), (4, 1, "loop", 12, 8),
                                                   (4, 2, "v", 8, 4), (4, 2, "loop", 8, 3)])
def test_best_schedule_is_valid_within_memory(pp, vpp, placement, m, k, hetero):
    costs = make_costs(pp, vpp, hetero=hetero, placement=placement, fused_share=0.85)
    limit = MemoryLimit(microbatches=k)
    choice = best_schedule(costs, microbatches=m, memory_limit=limit, method="auto", time_limit=0.3)
    assert validate(choice.schedule, costs, num_microbatches=m) == []
    sim = simulate(choice.schedule, costs)
    assert sim.step_time == pytest.approx(choice.step_time)
    assert all(p <= b for p, b in zip(sim.peak_act_bytes, limit.activation_limit(costs)))
    assert choice.lower_bound <= choice.step_time * (1 + 1e-9)
    assert choice.gap == pytest.approx(choice.step_time / choice.lower_bound - 1)


def test_heuristic_memo_is_a_pure_cache(monkeypatch):
    """[Note: heuristic memo] Asking again for the same costs gives the same choice and the
    same record of candidates, drawn once; with the memo off the answer is the same too."""
    import solvers.schedule.search.candidates as schedules

    costs = make_costs(4, hetero=True, fused_share=0.85)
    kw = dict(microbatches=12, memory_limit=MemoryLimit(microbatches=6), polish=False)
    schedules._memo.clear()
    first = best_schedule(costs, **kw)
    drawn = dict(schedules._memo)
    again = best_schedule(costs, **kw)
    assert len(drawn) == 1 and list(schedules._memo.values())[0] is list(drawn.values())[0]
    assert (again.name, again.schedule, again.tried) == (first.name, first.schedule, first.tried)
    monkeypatch.setattr(schedules, "_MEMO_SIZE", 0)
    schedules._memo.clear()
    fresh = best_schedule(costs, **kw)
    assert (fresh.name, fresh.schedule, fresh.tried) == (first.name, first.schedule, first.tried)
    assert not schedules._memo
    other = best_schedule(make_costs(4, hetero=True, fused_share=0.85, seed=7), **kw)
    assert other.step_time != first.step_time  # other costs are not served from the memo


def test_named_family_never_slower_than_its_order():
    costs = make_costs(4, hetero=True)
    choice = best_schedule(costs, microbatches=8, method="1f1b", time_limit=1.0)
    plain = simulate(generate("1f1b", pp=4, vpp=1, microbatches=8), costs).step_time
    assert choice.name.startswith("1f1b") and choice.step_time <= plain
    assert choice.status in ("HEURISTIC", "OPTIMAL")


@pytest.mark.parametrize("name", ["1f1b", "interleaved", "gpipe"])
def test_named_classic_family_keeps_its_exact_order(name):
    """What a user names is what Megatron/torch would run: no W moved, nothing reordered."""
    vpp = 2 if name == "interleaved" else 1
    costs = make_costs(4, hetero=True) if vpp == 1 else make_costs(4, hetero=True, vpp=2)
    choice = best_schedule(costs, microbatches=8, method=name, time_limit=1.0)
    assert choice.schedule == generate(name, pp=4, vpp=vpp, microbatches=8)
    assert choice.name == name


def test_zero_bubble_near_bound_with_2p_memory():
    """ZB-H2's regime (memory 2p, M >= 3p): within 2% of the lower bound."""
    costs = make_costs(8, hetero=True, seed=3)
    choice = best_schedule(costs, microbatches=24, memory_limit=MemoryLimit(microbatches=16),
                           method="zb-h2", time_limit=1.0)
    assert choice.gap < 0.02


@pytest.mark.parametrize("m", [8, 40])  # whole model and window search
def test_cpsat_time_limit_keeps_the_best_heuristic(m):
    costs = make_costs(4, hetero=True)
    choice = best_schedule(costs, microbatches=m, method="cpsat", time_limit=1e-3)
    heuristics = [d["step_time_s"] for d in choice.tried
                  if not d["schedule"].startswith("cpsat") and d.get("step_time_s")]
    assert choice.step_time <= min(heuristics)
    assert choice.status in ("OPTIMAL", "FEASIBLE")
    assert validate(choice.schedule, costs, num_microbatches=m) == []


def test_memory_below_one_microbatch_per_stage_names_the_minimum():
    costs = make_costs(4)
    need = (costs.static_per_rank()[0] + rank_activation(costs)[0]) / 2**30
    with pytest.raises(InfeasibleError, match=rf"rank 0: {need:.2f} GiB .*at least {need:.2f}GiB"):
        best_schedule(costs, microbatches=8, memory_limit=MemoryLimit(bytes=int(8.5 * 2**30)))


def test_unmeetable_deadline_names_task_and_earliest_finish():
    costs = make_costs(4)
    early = earliest_finish(costs, (0, "W", 3))
    with pytest.raises(InfeasibleError, match=rf"task 0W3 .* cannot finish before {early:.6g} s"):
        best_schedule(costs, microbatches=8, deadlines={(0, "W", 3): early / 2})


def test_deadlines_no_schedule_can_meet_name_the_task():
    costs = make_costs(4)
    deadlines = {(0, "W", m): 0.2 for m in range(8)}  # each alone is reachable, all together not
    with pytest.raises(InfeasibleError, match=r"task 0W\d+ ends at .* earliest possible finish"):
        best_schedule(costs, microbatches=8, deadlines=deadlines)


def test_deadline_that_can_be_met_is_met():
    costs = make_costs(4, hetero=True)
    base = best_schedule(costs, microbatches=8, time_limit=1.0)
    deadlines = {(3, "W", 0): 0.5 * base.step_time}
    choice = best_schedule(costs, microbatches=8, deadlines=deadlines, time_limit=1.0)
    assert validate(choice.schedule, costs, num_microbatches=8, deadlines=deadlines) == []


@pytest.mark.parametrize("kw,match", [(dict(time_limit=0.0), "--time-limit"), (dict(time_limit=-1.0), "--time-limit"),
                                      (dict(seed=-1), "--seed"), (dict(method="zb-h9"), "--schedule")])
def test_bad_options(kw, match):
    with pytest.raises(InputError, match=match):
        best_schedule(make_costs(2), microbatches=4, **kw)


@pytest.mark.parametrize("text,expect", [("80GiB", MemoryLimit(bytes=80 * 2**30)), ("8.5e10", MemoryLimit(bytes=85 * 10**9)),
                                         ("4mb", MemoryLimit(microbatches=4.0)), ("2.5MB", MemoryLimit(microbatches=2.5)),
                                         ("40 GB", MemoryLimit(bytes=40 * 10**9)),
                                         ("16microbatches", MemoryLimit(microbatches=16.0)),
                                         ("1 microbatch", MemoryLimit(microbatches=1.0))])
def test_parse_memory_limit(text, expect):
    assert parse_memory_limit(text) == expect


@pytest.mark.parametrize("text,match", [("0.5mb", "below one microbatch"), ("lots", "cannot read"),
                                        ("0", "must be positive"), ("12 parsecs", "cannot read")])
def test_parse_memory_limit_rejects(text, match):
    with pytest.raises(InputError, match=match):
        parse_memory_limit(text)


def test_parse_deadlines():
    d = parse_deadlines(["0W3=0.8", "W=2"], num_stages=2, microbatches=4)
    assert d[(0, "W", 3)] == 2.0 and d[(1, "W", 0)] == 2.0 and len(d) == 8
    for bad, match in (("0W9=1", "no such task"), ("0W1", "TASK=SECONDS"), ("x=1", "not a task"), ("0W1=-2", "positive")):
        with pytest.raises(InputError, match=match):
            parse_deadlines([bad], num_stages=2, microbatches=4)


def test_lower_bound_below_every_schedule_found():
    """The bound is a necessary condition: no generated, filled or greedy schedule beats it."""
    for seed in range(12):
        rnd = random.Random(seed)
        pp, m = rnd.choice([2, 3, 4]), rnd.choice([2, 5, 8])
        costs = make_costs(pp, hetero=True, seed=seed, fused_share=rnd.choice([None, 0.7]))
        budget = [rnd.choice([1, 2, 3]) * a for a in rank_activation(costs)]
        lb = step_lower_bound(costs, m, activation_limit=budget)
        for name in ("1f1b", "zb-h1", "zb-h2", "gpipe", "1f1b-overlap"):
            s = fill_w(generate(name, pp=pp, vpp=1, microbatches=m), costs, activation_limit=budget)
            if s is not None:
                assert simulate(s, costs).step_time >= lb * (1 - 1e-9)
        for fuse in (False, True):
            g = list_schedule(costs, m, activation_limit=budget, fuse=fuse).schedule
            assert simulate(g, costs).step_time >= lb * (1 - 1e-9)


def test_memory_bound_grows_as_memory_shrinks():
    costs = make_costs(4)
    act = rank_activation(costs)
    tight = bound_parts(costs, 16, activation_limit=act)["memory"]
    loose = bound_parts(costs, 16, activation_limit=[8 * a for a in act])["memory"]
    assert tight > 2 * loose
