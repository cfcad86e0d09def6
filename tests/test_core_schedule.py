"""Schedule text form: parse/format round trip, bad tokens, dependencies, the grid."""

from __future__ import annotations

import pytest

from planner.core.schedule import (
    DEPENDENCIES,
    OVERLAP,
    Action,
    format_schedule,
    parse_action,
    parse_schedule,
    predecessors,
    provides,
    schedule_to_text,
)
from solvers.schedule.families.generators import gpipe, interleaved_1f1b, one_f_one_b


@pytest.mark.parametrize("text", ["2F0", "0I13", "11W7", "3B0", "(0F3;7I1)OVERLAP_F_B",
                                  "(1F10;1B2)OVERLAP_F_B"])
def test_action_round_trip(text):
    action = parse_action(text)
    assert str(action) == text
    assert parse_action(str(action)) == action


def test_fused_action_parts():
    a = parse_action("(0F3;7I1)OVERLAP_F_B")
    assert (a.stage, a.kind, a.microbatch) == (0, OVERLAP, 3)
    assert a.parts == (Action(0, "F", 3), Action(7, "I", 1))
    assert Action.fused(Action(0, "F", 3), Action(7, "I", 1)) == a
    assert provides(a) == [(0, "F", 3), (7, "I", 1)]
    assert provides(parse_action("2B4")) == [(2, "I", 4), (2, "W", 4)]


@pytest.mark.parametrize("make", [
    lambda: gpipe(3, 4, split_w=True),
    lambda: one_f_one_b(4, 6),
    lambda: one_f_one_b(3, 5, fuse=True),
    lambda: one_f_one_b(3, 5, fuse=True, split_w=True),
    lambda: interleaved_1f1b(2, 3, 4, split_w=True),
])
def test_schedule_round_trip(make):
    sched = make()
    text = format_schedule(sched)
    assert all(isinstance(k, str) for k in text)
    assert parse_schedule(text) == sched
    assert format_schedule(parse_schedule(text)) == text


@pytest.mark.parametrize("token", ["", "F0", "2X0", "2F", "-1F0", "2f0", "2F0x", "(0F3)OVERLAP_F_B",
                                   "(0I3;1F1)OVERLAP_F_B", "(0F3;1W1)OVERLAP_F_B",
                                   "(0F3;1I1;2I2)OVERLAP_F_B", "0F3;1I1", "(0F3;1I1)OVERLAP"])
def test_bad_tokens(token):
    with pytest.raises(ValueError, match="bad"):
        parse_action(token)


def test_bad_token_in_schedule_names_rank_and_position():
    with pytest.raises(ValueError, match=r"schedule\[1\]\[2\]: bad action '1Q0'"):
        parse_schedule({"0": ["0F0", "0B0"], "1": ["1F0", "1B0", "1Q0"]})


def test_parse_schedule_sorts_ranks():
    assert list(parse_schedule({"1": [], "0": ["0F0"]})) == [0, 1]


def test_predecessors_follow_the_dependency_table():
    s = 4
    assert predecessors(Action(0, "F", 2), s) == []
    assert predecessors(Action(2, "F", 2), s) == [(1, "F", 2)]
    assert predecessors(Action(3, "I", 1), s) == [(3, "F", 1)]  # last stage: loss is local
    assert predecessors(Action(1, "B", 1), s) == [(1, "F", 1), (2, "I", 1)]
    assert predecessors(Action(1, "W", 0), s) == [(1, "I", 0)]
    fused = Action.fused(Action(2, "F", 5), Action(2, "B", 1))
    assert predecessors(fused, s) == [(1, "F", 5), (2, "F", 1), (3, "I", 1)]
    # a fused pair whose parts depend on each other: that dependency is internal
    inner = Action.fused(Action(1, "F", 0), Action(1, "I", 0))
    assert predecessors(inner, 2) == [(0, "F", 0)]
    assert set(DEPENDENCIES) == {"F", "I", "W", "B"}


def test_grid_marks_one_cell():
    sched = one_f_one_b(2, 2)
    grid = schedule_to_text(sched, mark=(1, 1))
    lines = grid.splitlines()
    assert lines[0].startswith("rank |")
    assert lines[2].split("|")[1].split() == ["1F0", ">1B0<", "1F1", "1B1"]
    assert ">" not in lines[1]
    window = schedule_to_text(sched, window=(1, 3))
    assert window.splitlines()[0].split("|")[1].split() == ["1", "2"]


def test_action_kind_is_its_letter_in_text_and_json():
    """ActionKind members are the torch letters: parsing yields members, text and JSON keep the letters."""
    import json

    from planner.core.schedule import ActionKind
    a = parse_action("(0F3;7I1)OVERLAP_F_B")
    assert a.kind is ActionKind.OVERLAP_F_B and a.sub[0].kind is ActionKind.F
    assert str(a) == "(0F3;7I1)OVERLAP_F_B" and f"{a.sub[1].kind}" == "I"
    assert json.dumps([ActionKind.W]) == '["W"]' and ActionKind.B == "B"


def test_crossed_boundary_follows_the_dependency_rule():
    """Every cross-stage edge of DEPENDENCIES crosses the boundary between its two stages."""
    from planner.core.p2p import crossed_boundary
    from planner.core.schedule import DEPENDENCIES
    for kind, rules in DEPENDENCIES.items():
        for off, dep_kind in rules:
            if off:
                consumer, producer = 5, 5 + off
                assert crossed_boundary(producer, dep_kind) == min(consumer, producer)


def test_fused_admits_only_forward_beside_backward():
    """OVERLAP_F_B pairs an F with an I or B; anything else is refused where it is built."""
    from planner.core.schedule import ActionKind
    f, i, w = Action(0, ActionKind.F, 1), Action(1, ActionKind.I, 0), Action(1, ActionKind.W, 0)
    assert Action.fused(f, i).parts == (f, i)
    for fwd, bwd in ((f, w), (i, f), (f, f)):
        with pytest.raises(ValueError, match="cannot fuse"):
            Action.fused(fwd, bwd)
