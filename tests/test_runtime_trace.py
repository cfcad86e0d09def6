"""The overlap trace of a fused pair: order facts, not durations.

One process, layers exchanging over an emulated link: every exchange of either half
issued while the other half still runs has a whole compute segment of the other half
inside its window ([Note: overlap trace] in ``planner.runtime.trace``). The checks
read the order of events only, so load on the machine cannot fail them; the
two-process pipeline and expert-parallel runs are checked the same way in
``tests/test_runtime_overlap.py``.
"""

from __future__ import annotations

import pytest

import runtime_helpers as h  # noqa: E402  (same tests folder)
from planner.runtime.trace import PairTrace

LINK = {n: 0.002 for n in ("dispatch", "combine", "dispatch.grad", "combine.grad")}


def _rows(*events: tuple[str, str]) -> PairTrace:
    return PairTrace.from_rows([(k, p, kind, float(k)) for k, (p, kind) in enumerate(events)])


def test_taking_turns_hides_every_exchange():
    trace = _rows(("B", "start"), ("B", "issue"), ("F", "start"), ("F", "issue"), ("B", "done"),
                  ("B", "end"), ("F", "done"), ("F", "end"))
    assert [(a.kind, b.kind) for a, b in trace.segments("F")] == [("start", "issue"), ("done", "end")]
    assert len(trace.windows("B")) == len(trace.windows("F")) == 1
    assert trace.exposed("B") == [] and trace.exposed("F") == []


@pytest.mark.parametrize("order", [
    # one half after the other: the backward's exchange window holds no forward compute
    [("B", "start"), ("B", "issue"), ("B", "done"), ("B", "end"), ("F", "start"), ("F", "issue"),
     ("F", "done"), ("F", "end")],
    # the exchange waited for before the hand-over: it ended before the other half computed
    [("B", "start"), ("B", "issue"), ("B", "done"), ("F", "start"), ("F", "issue"), ("F", "done"),
     ("B", "end"), ("F", "end")],
], ids=["sequential", "waited-at-issue"])
def test_exchanges_not_overlapped_are_exposed(order):
    assert _rows(*order).exposed("B")


def test_fused_pair_of_moe_layers_hides_every_exchange():
    from planner.runtime.baton import run_pair
    from profiler.layers.program import EmulatedLink, set_wait_hook

    model = h.build((0, 1, 2), EmulatedLink(seconds=LINK))
    ids, _ = h.batch()
    first, second = ids.tensor_split(2)
    out = model(second)
    trace = PairTrace()
    y = run_pair(lambda: model(first), lambda: out.square().mean().backward(), timeout_s=60,
                 install=set_wait_hook, trace=trace)
    assert y.shape == out.shape and all(p.grad is not None for p in model.parameters() if p.requires_grad)
    for party in ("F", "B"):
        assert len(trace.windows(party)) >= 4, trace.to_rows()  # 2 MoE layers, dispatch + combine
        assert trace.exposed(party) == [], trace.to_rows()
