"""The first valid plan: 1F1B within the memory budget, reported before the search, and the
final plan the same with or without it ([Note: first plan] in planner.planning.first_plan)."""

from __future__ import annotations

import json

import pytest

import planner.planning as planning
from conftest import TtyStream
from cost_tables import spread, write_stage_table
from planner import progress as prog
from planner.api import plan
from planner.core.plan import without_wall_s
from planner.core.simulate import simulate
from planner.core.stage_costs import StageCosts
from planner.core.validate import validate
from planner.planning.first_plan import in_flight_caps
from solvers.schedule.families.generators import one_f_one_b

GIB = 2**30


def _costs(pp: int) -> StageCosts:
    return StageCosts(f=(1e-3,) * pp, i=(1e-3,) * pp, w=(2e-3,) * pp, act_bytes=(GIB,) * pp,
                      act_w_bytes=(GIB // 2,) * pp, static_bytes=(0,) * pp, out_bytes=(0,) * pp,
                      ranks=tuple(range(pp)))


@pytest.mark.parametrize("pp, m, caps", [(4, 8, [2, 2, 1, 1]), (8, 32, [4, 4, 3, 3, 2, 2, 1, 1]),
                                         (6, 12, [6, 5, 4, 3, 2, 1]), (5, 3, [1] * 5)])
def test_capped_1f1b_is_valid_and_holds_at_most_its_caps(pp, m, caps):
    costs = _costs(pp)
    sched = one_f_one_b(pp, m, in_flight=caps)
    assert validate(sched, costs, num_microbatches=m) == []
    peaks = simulate(sched, costs).peak_act_bytes
    assert [round(x / GIB) for x in peaks] == [min(c, m) for c in caps]


def test_capped_1f1b_refuses_caps_that_grow():
    with pytest.raises(ValueError, match="not grow"):
        one_f_one_b(4, 8, in_flight=[2, 3, 2, 1])


def test_caps_are_1f1b_without_a_budget_and_spread_out_under_one():
    assert in_flight_caps(8, [GIB] * 8, None) == [8, 7, 6, 5, 4, 3, 2, 1]
    assert in_flight_caps(8, [GIB] * 8, [16 * GIB] * 8) == [8, 7, 6, 5, 4, 3, 2, 1]
    caps = in_flight_caps(16, [GIB] * 16, [8 * GIB] * 16)
    assert caps[0] == 8 and caps[-1] == 1 and all(a - b in (0, 1) for a, b in zip(caps, caps[1:]))
    # no three neighbours in lockstep: the equal pairs are spread out, not stacked on the first ranks
    assert not any(a == b == c for a, b, c in zip(caps, caps[1:], caps[2:]))
    assert in_flight_caps(4, [GIB] * 4, [GIB // 2] * 4) is None


def _table(tmp_path, pp: int):
    return write_stage_table(tmp_path / "t.json", f=1e-3, i=1e-3, w=2e-3, factors=spread(pp, 0.4))


def test_first_plan_is_reported_before_the_search_and_validates(tmp_path):
    seen = []
    with prog.listening(lambda event, fields: seen.append((event, dict(fields)))):
        p = plan(profile=str(_table(tmp_path, 8)), pp=8, microbatches=16, memory_limit="3microbatches", work=0.3)
    assert [e for e, _ in seen] == ["first plan"]
    first = seen[0][1]
    assert first["schedule"] == "1f1b-cap3" and first["in_flight"][0] == 3
    assert first["step_time_s"] >= p.predicted.step_time_s  # the search improves on it
    assert first["bounds"] == tuple((s, s + 1) for s in range(8))


@pytest.mark.usefixtures("progress_shown")
def test_a_milestone_shows_on_the_bar_and_reaches_listeners_even_when_quiet():
    got, stream = [], TtyStream()
    with prog.progress("planning t", total=1, stream=stream) as bar, \
            prog.listening(lambda event, fields: got.append((event, fields["step_time_s"]))):
        prog.set_quiet(True)
        try:
            prog.milestone("first plan", "first plan 1f1b 0.25 s", step_time_s=0.25)
        finally:
            prog.set_quiet(False)
        assert (bar.phase, bar.note) == ("first plan", "first plan 1f1b 0.25 s")
        assert stream.getvalue().endswith("first plan 1f1b 0.25 s\x1b[K")  # drawn at once, not at the next tick
    assert got == [("first plan", 0.25)]
    prog.milestone("first plan", "no bar, no listener: nothing happens", step_time_s=0.0)


def test_the_final_plan_is_the_same_without_the_first_plan(tmp_path, monkeypatch):
    args = dict(profile=str(_table(tmp_path, 8)), pp=8, microbatches=16, memory_limit="3microbatches", work=0.3)
    with_first = without_wall_s(json.loads(plan(**args).to_json()))
    monkeypatch.setattr(planning, "report_first_plan", lambda table, req: None)
    without = without_wall_s(json.loads(plan(**args).to_json()))
    assert with_first == without


@pytest.mark.parametrize("extra, family", [(dict(schedule="zb-h1"), "zb-h1"), (dict(vpp=2), "interleaved"),
                                           (dict(vpp=2, memory_limit="1microbatches"), "greedy")])  # under budget
def test_without_the_1f1b_pass_the_first_screened_family_is_the_first_plan(tmp_path, extra, family):
    seen = []
    with prog.listening(lambda event, fields: seen.append(dict(fields))):
        p = plan(profile=str(_table(tmp_path, 8)), pp=4, microbatches=8, work=0.2, **extra)
    assert len(seen) == 1 and seen[0]["schedule"] == family and seen[0]["in_flight"] == ()
    assert seen[0]["step_time_s"] >= p.predicted.step_time_s * (1 - 1e-12)
    assert len(seen[0]["bounds"]) == 4 * extra.get("vpp", 1)


def test_the_final_plan_is_the_same_without_the_screened_first_plan(tmp_path, monkeypatch):
    args = dict(profile=str(_table(tmp_path, 8)), pp=4, vpp=2, microbatches=8, work=0.2)
    with_first = without_wall_s(json.loads(plan(**args).to_json()))
    monkeypatch.setattr(planning, "report_screened", lambda *a: None)
    assert without_wall_s(json.loads(plan(**args).to_json())) == with_first


def test_no_first_plan_is_made_when_nobody_would_hear_of_it(tmp_path, monkeypatch):
    """Library callers with no bar open and no listener do not pay for the first plan."""
    def boom(*args, **kwargs):
        raise AssertionError("first plan made with nobody listening")

    monkeypatch.setattr(planning, "report_first_plan", boom)
    monkeypatch.setattr(planning, "report_screened", boom)
    assert not prog.heard()
    plan(profile=str(_table(tmp_path, 8)), pp=8, microbatches=16, memory_limit="3microbatches", work=0.3)
    with pytest.raises(AssertionError, match="nobody listening"), prog.listening(lambda *_: None):
        plan(profile=str(_table(tmp_path, 8)), pp=8, microbatches=16, memory_limit="3microbatches", work=0.3)
